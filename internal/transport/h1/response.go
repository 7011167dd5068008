package h1

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is the lane's http.ResponseWriter. It follows net/http's rules
// for what a response carries (see WriteHeader and finishHead) and its
// buffering: it holds up to holdBytes of body and sends it with the head
// when the handler returns, so a small response leaves after everything
// the handler did (its access log line included). A larger body goes out
// as soon as it is written, head and body in one writev.
//
// Two deliberate differences: a body written without a Content-Length
// header is held whole and sent, with its length, when the handler
// returns (never chunked; the handlers this serves set a length for every
// large body), and it does not implement http.Flusher. Transfer-Encoding
// set by the handler is therefore dropped. The writer is owned by its
// connection's goroutine.
type response struct {
	c      *conn
	header http.Header
	now    time.Time

	status      int
	wroteHeader bool
	headSent    bool
	isHead      bool   // HEAD: body writes are counted, not sent
	clientClose bool   // the client asked to close
	clen        int64  // the handler's Content-Length; -1 when none
	setLength   bool   // clen was computed here and goes into the head
	written     int64  // body bytes accepted: sent, held or, for HEAD, counted
	held        []byte // body bytes not sent yet (for HEAD: the first sniffLen)
	err         error  // the first write error; the connection ends

	// Taken from the header at WriteHeader, which also writes the
	// status line and the handler's fields into c.head: like net/http,
	// changes to the header after WriteHeader are not sent.
	sniff        bool     // no Content-Type and no Content-Encoding: sniff one
	handlerClose bool     // the handler's Connection field says close
	connection   []string // the handler's Connection field
}

func (w *response) reset(isHead, clientClose bool, now time.Time) {
	clear(w.header)
	held := w.held[:0]
	if cap(held) > 64<<10 {
		held = nil // do not keep a large buffer for the next request
	}
	*w = response{c: w.c, header: w.header, now: now, isHead: isHead, clientClose: clientClose, clen: -1, held: held}
}

// Header returns the response header map.
func (w *response) Header() http.Header { return w.header }

// WriteHeader records the status and writes the start of the head: the
// status line, the handler's header fields as they are now, and Date.
// As in net/http, a code outside 100..999 panics, an invalid
// Content-Length is dropped (and logged), a second call is ignored, and a
// 304 loses Content-Type and Content-Length (any other status without a
// body loses Content-Length). Informational (1xx) statuses are not
// supported and are ignored.
func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.wroteHeader || code < 200 {
		return
	}
	w.writeHead(code, nil)
}

// WriteHeaderFields is WriteHeader for a response whose head is partly
// serialized already, which spares the header map most of its fields. fields
// holds complete header lines ("Name: value\r\n"), each a valid field name
// and a value without CR or LF, none of them Connection, Transfer-Encoding,
// Content-Length or Date, nor a field the header map has; the lane writes
// them after the map's fields, unchecked. The body is contentLength bytes
// long and has its Content-Type in fields or the map: the lane writes
// Content-Length and sniffs nothing. code must allow a body (2xx other
// than 204, or 3xx other than 304); any other code panics, as does a
// negative length. A response whose header was written ignores the call.
func (w *response) WriteHeaderFields(code int, fields []byte, contentLength int64) {
	if code < 200 || code > 999 || !bodyAllowed(code) || contentLength < 0 {
		panic("h1: WriteHeaderFields with code " + strconv.Itoa(code) + " and length " + strconv.FormatInt(contentLength, 10))
	}
	if w.wroteHeader {
		return
	}
	delete(w.header, "Content-Length")
	w.writeHead(code, fields)
	w.clen, w.setLength, w.sniff = contentLength, true, false
}

// writeHead records code and writes the start of the head: the status
// line, the header map's fields as they are now, then fields (serialized
// by the caller, see WriteHeaderFields), then Date.
func (w *response) writeHead(code int, fields []byte) {
	w.wroteHeader, w.status = true, code
	h := w.header
	if v := h["Content-Length"]; len(v) > 0 {
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err == nil && n >= 0 && len(v) == 1 {
			w.clen = n
		} else {
			w.c.s.logf("h1: invalid Content-Length of %q", v)
			delete(h, "Content-Length")
		}
	}
	_, haveType := h["Content-Type"]
	enc := h["Content-Encoding"] // h.Get without canonicalizing the key
	w.sniff = !haveType && (len(enc) == 0 || enc[0] == "") && bodyAllowed(code)
	w.connection = h["Connection"]
	w.handlerClose = httpguts.HeaderValuesContainsToken(w.connection, "close")

	b := append(w.c.head[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	b = append(b, "\r\n"...)
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) || suppressed(code, k) {
			continue
		}
		for _, v := range vv {
			b = append(b, k...)
			b = append(b, ": "...)
			b = appendValue(b, v)
			b = append(b, "\r\n"...)
		}
	}
	b = append(b, fields...)
	if _, ok := h["Date"]; !ok {
		b = w.c.s.appendDate(b, w.now)
	}
	w.c.head = b
}

// suppressed reports whether WriteHeader leaves the field k out: the
// ones finishHead decides, and what a response without a body must not
// carry.
func suppressed(code int, k string) bool {
	switch k {
	case "Connection", "Transfer-Encoding":
		return true
	case "Content-Length":
		return !bodyAllowed(code)
	case "Content-Type":
		return code == http.StatusNotModified
	}
	return false
}

// holdBytes is how much body the writer holds before sending, as
// net/http's 4 KiB buffer does.
const holdBytes = 4 << 10

// sniffLen is how much of a body http.DetectContentType looks at.
const sniffLen = 512

// Write sends (or holds) body bytes.
func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.clen >= 0 && w.written+int64(len(p)) > w.clen {
		return 0, http.ErrContentLength
	}
	if w.isHead {
		// Not sent; the first bytes only serve to sniff a Content-Type,
		// as net/http does.
		if n := sniffLen - len(w.held); n > 0 {
			w.held = append(w.held, p[:min(n, len(p))]...)
		}
		w.written += int64(len(p))
		return len(p), nil
	}
	if w.clen < 0 || (!w.headSent && len(w.held)+len(p) <= holdBytes) {
		w.held = append(w.held, p...)
		w.written += int64(len(p))
		return len(p), nil
	}
	if err := w.send(w.held, p); err != nil {
		return 0, err
	}
	w.held = w.held[:0]
	w.written += int64(len(p))
	return len(p), nil
}

// finish completes the response after the handler returned and reports
// whether the connection may serve another request.
func (w *response) finish() bool {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		// As net/http: a length even of zero, except for a HEAD whose
		// handler wrote nothing (it may have skipped the body on purpose).
		if w.clen < 0 && bodyAllowed(w.status) && (!w.isHead || w.written > 0) {
			w.clen, w.setLength = w.written, true
		}
		_ = w.send(w.held, nil)
	}
	if w.err != nil {
		return false
	}
	// A body shorter than its Content-Length leaves the client waiting
	// for bytes that never come: only closing ends it.
	if w.clen >= 0 && !w.isHead && bodyAllowed(w.status) && w.written < w.clen {
		return false
	}
	return !w.closing()
}

// closing reports whether the response ends the connection.
func (w *response) closing() bool {
	return w.clientClose || w.handlerClose || w.c.s.inShutdown.Load()
}

// send writes a and then b, preceded by the head if it was not sent yet.
// A HEAD response sends the head only.
func (w *response) send(a, b []byte) error {
	c := w.c
	var head []byte
	if !w.headSent {
		w.headSent = true
		c.head = w.finishHead(c.head, a, b)
		head = c.head
		if w.isHead {
			a, b = nil, nil
		}
	}
	c.iov = [3][]byte{head, a, b} // empty ones are skipped
	iov := net.Buffers(c.iov[:])
	if c.batch == nil && c.lp.Load() != nil {
		// On an event loop: what the socket does not take at once is
		// written from Go's poller, off the loop (with TLS, fdConn does
		// that for the batch).
		n, err := c.writeOnLoop(c.iov[:])
		for len(iov) > 0 && n >= len(iov[0]) {
			n -= len(iov[0])
			iov = iov[1:]
		}
		if len(iov) > 0 {
			iov[0] = iov[0][n:]
		}
		if err != nil || len(iov) == 0 {
			c.iov = [3][]byte{}
			if err != nil && w.err == nil {
				w.err = err
			}
			return err
		}
	}
	if c.batch != nil {
		// Over TLS each record would be its own write: send them in one.
		c.batch.Hold()
	}
	_, err := iov.WriteTo(c.rwc)
	if c.batch != nil {
		if ferr := c.batch.Flush(); err == nil {
			err = ferr
		}
	}
	c.iov = [3][]byte{} // keep no reference to the body
	if err != nil && w.err == nil {
		w.err = err
	}
	return err
}

// finishHead appends to the start WriteHeader wrote what depends on the
// body and the connection: a computed Content-Length, a sniffed
// Content-Type (from the first sniffLen bytes of a then b), and
// Connection: close when the connection ends (replacing the handler's
// field unless it says close itself, as net/http does), then the empty
// line.
func (w *response) finishHead(b, a, rest []byte) []byte {
	if w.setLength {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, w.clen, 10)
		b = append(b, "\r\n"...)
	}
	if w.sniff && len(a)+len(rest) > 0 {
		data := a
		if len(a) < sniffLen && len(rest) > 0 {
			data = append(a[:len(a):len(a)], rest[:min(len(rest), sniffLen-len(a))]...)
		}
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType(data)...)
		b = append(b, "\r\n"...)
	}
	conn := w.connection
	if w.closing() && !w.handlerClose {
		conn = connClose
	}
	for _, v := range conn {
		b = append(b, "Connection: "...)
		b = appendValue(b, v)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

var connClose = []string{"close"}

// appendValue appends a header value as net/http writes it: CR and LF
// replaced by spaces, then surrounding white space removed.
func appendValue(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' {
			v = newlineToSpace.Replace(v)
			break
		}
	}
	return append(b, trimSpaceTab(v)...)
}

var newlineToSpace = strings.NewReplacer("\r", " ", "\n", " ")

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified && status >= 200
}

var _ http.ResponseWriter = (*response)(nil)
