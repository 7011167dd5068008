package h2

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// response is the lane's http.ResponseWriter, with net/http's rules for
// what a response carries (the same as internal/transport/h1's): it holds up to
// holdBytes of body and sends it with the head when the handler returns,
// so a small response gets a content-length and leaves in one batch; a
// larger body with a Content-Length goes out as it is written. A body
// written without a Content-Length is held whole and sent with its
// length when the handler returns, unless the handler flushes. The
// handler's goroutine owns it.
type response struct {
	st     *stream
	header http.Header
	now    time.Time

	status      int
	wroteHeader bool
	headSent    bool
	ended       bool   // END_STREAM queued
	isHead      bool   // HEAD: body writes are counted, not sent
	clen        int64  // the handler's Content-Length; -1 when none
	setLength   bool   // clen was computed here and goes into the head
	sniff       bool   // no Content-Type and no Content-Encoding: sniff one
	fields      []byte // header lines serialized by the handler (WriteHeaderFields)
	written     int64
	held        []byte
	err         error
}

// holdBytes is how much body the writer holds before sending, as
// net/http's HTTP/2 buffer does.
const holdBytes = 4 << 10

// sniffLen is how much of a body http.DetectContentType looks at.
const sniffLen = 512

// init readies w for st's request; the header map and the held buffer
// of the stream's previous request are reused.
func (w *response) init(st *stream, isHead bool, now time.Time) {
	header, held := w.header, w.held[:0]
	if header == nil {
		header = make(http.Header, 16)
	}
	*w = response{st: st, header: header, held: held, now: now, isHead: isHead, clen: -1}
}

// Header returns the response header map.
func (w *response) Header() http.Header { return w.header }

// WriteHeader records the status. As in net/http, a code outside
// 100..999 panics, an invalid Content-Length is dropped (and logged), and
// a second call is ignored. Informational (1xx) statuses are not sent.
func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("h2: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.wroteHeader || code < 200 {
		return
	}
	w.wroteHeader, w.status = true, code
	h := w.header
	if v := h["Content-Length"]; len(v) > 0 {
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err == nil && n >= 0 && len(v) == 1 {
			w.clen = n
		} else {
			w.st.c.s.logf("h2: invalid Content-Length of %q", v)
			delete(h, "Content-Length")
		}
	}
	_, haveType := h["Content-Type"]
	w.sniff = !haveType && h.Get("Content-Encoding") == "" && bodyAllowed(code)
}

// WriteHeaderFields is WriteHeader for a response whose head is partly
// serialized already, with the contract of the HTTP/1.1 lane's
// (internal/transport/h1): fields holds complete HTTP/1.1 header lines
// ("Name: value\r\n"), each a valid field name and a value without CR or
// LF, none of them Connection, Transfer-Encoding, Content-Length or Date,
// nor a field the header map has; the body is contentLength bytes long and
// has its Content-Type in fields or the map. code must allow a body; any
// other code panics, as does a negative length. A response whose header
// was written ignores the call.
//
// The lane sends fields, after the map's, as HPACK literals that never
// enter the dynamic table: a block that means the same on any connection,
// whatever its table holds. It keeps the last block it encoded per
// connection and reuses it while the handler passes the same slice again,
// so the caller must not modify a slice it passed.
func (w *response) WriteHeaderFields(code int, fields []byte, contentLength int64) {
	if code < 200 || code > 999 || !bodyAllowed(code) || contentLength < 0 {
		panic("h2: WriteHeaderFields with code " + strconv.Itoa(code) + " and length " + strconv.FormatInt(contentLength, 10))
	}
	if w.wroteHeader {
		return
	}
	delete(w.header, "Content-Length")
	w.WriteHeader(code)
	w.clen, w.setLength, w.sniff, w.fields = contentLength, true, false, fields
}

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
		if n := sniffLen - len(w.held); n > 0 {
			w.held = append(w.held, p[:min(n, len(p))]...)
		}
		w.written += int64(len(p))
		return len(p), nil
	}
	if w.clen < 0 && !w.headSent || !w.headSent && len(w.held)+len(p) <= holdBytes {
		w.held = append(w.held, p...)
		w.written += int64(len(p))
		return len(p), nil
	}
	w.written += int64(len(p))
	end := w.clen >= 0 && w.written == w.clen
	if err := w.send(w.held, p, end); err != nil {
		return 0, err
	}
	w.held = w.held[:0]
	return len(p), nil
}

// Flush sends the head and whatever body is held.
func (w *response) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.isHead || w.ended {
		return
	}
	if !w.headSent || len(w.held) > 0 {
		if w.send(w.held, nil, false) != nil {
			return
		}
		w.held = w.held[:0]
	}
	_ = w.st.c.flush()
}

// finish completes the response after the handler returned.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.ended || w.err != nil {
		return
	}
	if !w.headSent && w.clen < 0 && bodyAllowed(w.status) && (!w.isHead || w.written > 0) {
		// As net/http: a length even of zero, except for a HEAD whose
		// handler wrote nothing (it may have skipped the body on purpose).
		w.clen, w.setLength = w.written, true
	}
	body := w.held
	if w.isHead {
		body = nil
	}
	if w.clen >= 0 && !w.isHead && bodyAllowed(w.status) && w.written < w.clen {
		// A body shorter than its Content-Length: the client must not
		// take it for the whole (net/http closes the connection).
		if w.send(body, nil, false) == nil {
			w.st.c.resetStream(w.st.id, http2.ErrCodeInternal)
		}
		return
	}
	_ = w.send(body, nil, true)
	w.held = w.held[:0]
}

// send queues the head if it was not sent, then a and b as DATA; end
// ends the stream after them. It blocks while too much of the body waits
// for flow-control credit.
func (w *response) send(a, b []byte, end bool) error {
	st := w.st
	c := st.c
	c.mu.Lock()
	if st.closed || c.werr != nil {
		c.mu.Unlock()
		w.err = errStreamReset
		return w.err
	}
	if !w.headSent {
		w.headSent = true
		noBody := w.isHead || !bodyAllowed(w.status)
		if noBody {
			a, b = nil, nil
		}
		endHeaders := end && len(a)+len(b) == 0
		c.writeHeadersLocked(w, a, b, endHeaders)
		if endHeaders {
			w.ended = true
			c.localEndLocked(st)
			c.mu.Unlock()
			return nil
		}
	}
	ok := true
	if len(b) == 0 {
		ok = w.queueLocked(a, end)
	} else {
		ok = w.queueLocked(a, false) && w.queueLocked(b, end)
	}
	w.ended = end
	if !ok || st.closed && len(st.pending) > 0 || c.werr != nil {
		w.err = errStreamReset
	}
	c.mu.Unlock()
	return w.err
}

// queueLocked sends p on the stream as far as flow control allows and
// keeps at most maxPending of it waiting for credit: for more, it waits
// (and the connection's reading moves off this goroutine) until the
// client's credit lets it through or the stream closes. It reports false
// when the stream closed first.
func (w *response) queueLocked(p []byte, end bool) bool {
	st := w.st
	c := st.c
	for {
		if st.closed || c.werr != nil {
			return false
		}
		if p = c.writeDataLocked(st, p, end); len(p) == 0 {
			return true
		}
		c.mu.Unlock()
		st.detach() // waiting: the connection must go on reading
		_ = c.flush()
		<-st.wake
		c.mu.Lock()
	}
}

// writeHeadersLocked queues the response head of w as HEADERS (and
// CONTINUATION beyond the client's frame size); body is what follows, for
// sniffing a Content-Type.
func (c *conn) writeHeadersLocked(w *response, a, b []byte, endStream bool) {
	c.hbuf.Reset()
	enc := c.henc
	_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: statusValue(w.status)})
	for k, vv := range w.header {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		lk := c.lower.get(k)
		switch lk {
		case "connection", "proxy-connection", "transfer-encoding", "upgrade", "keep-alive":
			continue // connection-specific: not in HTTP/2
		case "content-length":
			if !bodyAllowed(w.status) {
				continue
			}
		case "content-type":
			if w.status == http.StatusNotModified {
				continue
			}
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			_ = enc.WriteField(hpack.HeaderField{Name: lk, Value: v})
		}
	}
	c.hbuf.Write(c.literals(w.fields))
	if w.setLength {
		if c.lenValue == "" || c.lenOf != w.clen {
			c.lenOf, c.lenValue = w.clen, strconv.FormatInt(w.clen, 10)
		}
		_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: c.lenValue})
	}
	if w.sniff && len(a)+len(b) > 0 {
		data := a
		if len(a) < sniffLen && len(b) > 0 {
			data = append(a[:len(a):len(a)], b[:min(len(b), sniffLen-len(a))]...)
		}
		_ = enc.WriteField(hpack.HeaderField{Name: "content-type", Value: http.DetectContentType(data)})
	}
	if _, ok := w.header["Date"]; !ok {
		_ = enc.WriteField(hpack.HeaderField{Name: "date", Value: c.s.dateFor(w.now)})
	}
	block := c.hbuf.Bytes()
	max := int(c.peerMaxFrame)
	first := min(len(block), max)
	_ = c.wfr.WriteHeaders(http2.HeadersFrameParam{
		StreamID: w.st.id, BlockFragment: block[:first], EndStream: endStream, EndHeaders: first == len(block),
	})
	for block = block[first:]; len(block) > 0; {
		n := min(len(block), max)
		_ = c.wfr.WriteContinuation(w.st.id, n == len(block), block[:n])
		block = block[n:]
	}
}

// literals returns fields (header lines, see WriteHeaderFields) as HPACK
// literal fields without indexing, each name lower-cased and each string
// Huffman-coded where that is shorter: they touch no dynamic table, so the
// block is right on any connection at any time. The last block's coding
// is kept and returned again while fields is the same slice. c.mu must be
// held.
func (c *conn) literals(fields []byte) []byte {
	if len(fields) == 0 {
		return nil
	}
	if len(c.litSrc) == len(fields) && &c.litSrc[0] == &fields[0] {
		return c.litOut
	}
	b := c.litOut[:0]
	for rest := fields; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, crlf)
		name, value, _ := bytes.Cut(line, colonSpace)
		b = append(b, 0) // literal header field without indexing, new name (RFC 7541 §6.2.2)
		b = appendHPACKString(b, strings.ToLower(string(name)))
		b = appendHPACKString(b, string(value))
	}
	c.litSrc, c.litOut = fields, b
	return b
}

var (
	crlf       = []byte("\r\n")
	colonSpace = []byte(": ")
)

// appendHPACKString appends s as an HPACK string literal (RFC 7541 §5.2),
// Huffman-coded when that is shorter.
func appendHPACKString(b []byte, s string) []byte {
	if n := hpack.HuffmanEncodeLength(s); n < uint64(len(s)) {
		b = appendHPACKInt(b, 0x80, n)
		return hpack.AppendHuffmanString(b, s)
	}
	b = appendHPACKInt(b, 0, uint64(len(s)))
	return append(b, s...)
}

// appendHPACKInt appends n with a 7-bit prefix (RFC 7541 §5.1) in a first
// byte whose high bit is flag.
func appendHPACKInt(b []byte, flag byte, n uint64) []byte {
	const max = 1<<7 - 1
	if n < max {
		return append(b, flag|byte(n))
	}
	b = append(b, flag|max)
	for n -= max; n >= 0x80; n >>= 7 {
		b = append(b, byte(n)|0x80)
	}
	return append(b, byte(n))
}

// writeDataLocked queues p as DATA on st as far as flow control allows
// and keeps what does not go pending, up to maxPending in all; end ends
// the stream after p. It returns the part of p that is neither queued
// nor pending (nothing when all of p is).
func (c *conn) writeDataLocked(st *stream, p []byte, end bool) []byte {
	if len(p) == 0 && !end {
		return nil
	}
	if !st.blocked {
		if p = c.sendLocked(st, p, end); len(p) == 0 {
			return nil
		}
		c.setPendingLocked(st, st.pending[:0])
		st.blocked = true
		st.stallSince = time.Now()
		c.blocked = append(c.blocked, st)
		c.armReadDeadlineLocked() // the stall timeout
	}
	n := min(len(p), max(0, maxPending-len(st.pending)), max(0, maxConnPending-c.pendingBytes))
	c.setPendingLocked(st, append(st.pending, p[:n]...))
	if n < len(p) {
		return p[n:]
	}
	st.pendingEnd = st.pendingEnd || end
	return nil
}

// setPendingLocked makes p st's pending data, keeping the connection's
// total of pending bytes up to date.
func (c *conn) setPendingLocked(st *stream, p []byte) {
	c.pendingBytes += len(p) - len(st.pending)
	st.pending = p
}

// appendDataLocked queues a DATA frame of p on stream id, END_STREAM when
// end: the frame Framer.WriteData writes, appended to c.out directly
// rather than copied into the Framer's buffer first, which cost a copy of
// every body (docs/performance.md, Open loop).
func (c *conn) appendDataLocked(id uint32, end bool, p []byte) {
	var flags http2.Flags
	if end {
		flags = http2.FlagDataEndStream
	}
	n := len(p)
	c.takeOut()
	c.out = append(c.out, byte(n>>16), byte(n>>8), byte(n), byte(http2.FrameData), byte(flags),
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
	c.out = append(c.out, p...)
}

// sendLocked queues as much of p as DATA frames as the windows and the
// client's frame size allow, END_STREAM on the last when end and all of p
// went; it returns what did not go.
func (c *conn) sendLocked(st *stream, p []byte, end bool) []byte {
	for {
		n := int(min(int64(len(p)), int64(c.peerMaxFrame), c.sendWindow, st.sendWindow))
		if n < 0 {
			n = 0
		}
		if n == 0 && len(p) > 0 {
			return p
		}
		last := n == len(p)
		c.appendDataLocked(st.id, end && last, p[:n])
		c.sendWindow -= int64(n)
		st.sendWindow -= int64(n)
		p = p[n:]
		if last {
			if end {
				c.localEndLocked(st)
			}
			return nil
		}
	}
}

// drainBlockedLocked sends what credit now allows of the blocked
// streams' pending data, oldest first.
func (c *conn) drainBlockedLocked() {
	if len(c.blocked) == 0 {
		return
	}
	streams := c.blocked
	c.blocked = nil
	for i, st := range streams {
		if st.closed {
			continue
		}
		if c.sendWindow <= 0 {
			c.blocked = append(c.blocked, streams[i:]...)
			break
		}
		if len(st.pending) == 0 && !st.pendingEnd {
			// Its writer waits for room: wake it only when the stream
			// may send, so that a client dribbling credit to one stream
			// does not wake every other stream's writer.
			if st.sendWindow > 0 {
				st.blocked = false
				st.wakeUp()
			} else {
				c.blocked = append(c.blocked, st)
			}
			continue
		}
		before := len(st.pending)
		// Sending its last frame closes st, and when its handler has
		// returned that drops its last reference and puts it back in the
		// pool, where another connection may take it: hold a reference
		// until this loop is done with it.
		st.refs++
		rest := c.sendLocked(st, st.pending, st.pendingEnd)
		if st.closed {
			c.unrefLocked(st) // closeStreamLocked unblocked and woke it
			continue
		}
		if len(rest) > 0 {
			// What is left stays where it is: moving it to the front
			// would copy the whole pending body for every byte of credit
			// a dribbling client gives.
			c.setPendingLocked(st, rest)
			c.blocked = append(c.blocked, st)
		} else {
			st.blocked = false
			c.setPendingLocked(st, st.pending[:0])
		}
		if len(rest) < before || len(rest) == 0 {
			st.wakeUp() // room for more of its body
		}
		c.unrefLocked(st)
	}
	c.maybeIdleLocked()
}

// unblockLocked takes st out of the blocked list.
func (c *conn) unblockLocked(st *stream) {
	st.blocked = false
	for i, x := range c.blocked {
		if x == st {
			c.blocked = append(c.blocked[:i], c.blocked[i+1:]...)
			break
		}
	}
}

// statusValues holds the :status values 100..999.
var statusValues = func() (v [1000]string) {
	for i := 100; i < 1000; i++ {
		v[i] = strconv.Itoa(i)
	}
	return v
}()

func statusValue(code int) string { return statusValues[code] }

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified && status >= 200
}

var (
	_ http.ResponseWriter = (*response)(nil)
	_ http.Flusher        = (*response)(nil)
)
