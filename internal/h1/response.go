package h1

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is the lane's http.ResponseWriter. Like net/http's buffered
// writer, it holds up to holdBytes of body and sends it with the head
// when the handler returns, so a small response leaves after everything
// the handler did (its access log line included). A larger body goes out
// as soon as it is written, head and body in one writev. A body written
// without a Content-Length header is held whole and sent, with its
// length, when the handler returns; the handlers this serves set one for
// every large body. It is owned by its connection's goroutine.
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
	held        []byte // body bytes not sent yet
	err         error  // the first write error; the connection ends
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

// WriteHeader records the status; the head is sent with the first body
// bytes or when the handler returns. Informational (1xx) statuses are not
// supported and are ignored; a second call is ignored, as in net/http.
func (w *response) WriteHeader(code int) {
	if w.wroteHeader || code < 200 {
		if code < 100 || code > 999 {
			panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
		}
		return
	}
	w.wroteHeader, w.status = true, code
	if v := w.header["Content-Length"]; len(v) == 1 {
		if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n >= 0 {
			w.clen = n
		}
	}
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
		if w.clen < 0 && bodyAllowed(w.status) {
			// For HEAD, what the handler wrote, as net/http reports it.
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
	return w.clientClose || w.c.s.inShutdown.Load() ||
		httpguts.HeaderValuesContainsToken(w.header["Connection"], "close")
}

// send writes a and then b, preceded by the head if it was not sent yet.
// A HEAD response sends the head only.
func (w *response) send(a, b []byte) error {
	c := w.c
	var head []byte
	if !w.headSent {
		w.headSent = true
		sniff := a
		if len(sniff) == 0 {
			sniff = b
		}
		c.head = w.appendHead(c.head[:0], sniff)
		head = c.head
		if w.isHead {
			a, b = nil, nil
		}
	}
	c.iov = [3][]byte{head, a, b} // empty ones are skipped
	iov := net.Buffers(c.iov[:])
	_, err := iov.WriteTo(c.rwc)
	c.iov = [3][]byte{} // keep no reference to the body
	if err != nil && w.err == nil {
		w.err = err
	}
	return err
}

// appendHead appends the status line and header fields. As net/http does,
// it skips fields with invalid names, turns CR and LF in values into
// spaces, adds Date unless the handler set the key, sniffs a Content-Type
// for a body without one, and says Connection: close when it closes.
func (w *response) appendHead(b []byte, body []byte) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(w.status), 10)
	b = append(b, ' ')
	if text := http.StatusText(w.status); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(w.status), 10)
	}
	b = append(b, "\r\n"...)
	for k, vv := range w.header {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			b = append(b, k...)
			b = append(b, ": "...)
			b = appendValue(b, v)
			b = append(b, "\r\n"...)
		}
	}
	if _, ok := w.header["Date"]; !ok {
		b = w.c.s.appendDate(b, w.now)
	}
	if w.setLength {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, w.clen, 10)
		b = append(b, "\r\n"...)
	}
	if _, ok := w.header["Content-Type"]; !ok && len(body) > 0 && bodyAllowed(w.status) {
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType(body)...)
		b = append(b, "\r\n"...)
	}
	if w.closing() && len(w.header["Connection"]) == 0 {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, "\r\n"...)
}

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
