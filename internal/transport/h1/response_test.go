package h1_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestResponseWriter covers the lane's writer through a real Serve. After
// each response that keeps the connection, a second request on it checks
// that the first response's framing was exact.
func TestResponseWriter(t *testing.T) {
	const customDate = "Mon, 01 Jan 2001 00:00:00 GMT"
	big := strings.Repeat("z", 70000)
	for _, tc := range []struct {
		name    string
		method  string
		extra   string // more request fields, CRLF-terminated
		handler func(w http.ResponseWriter, r *http.Request, errs chan<- error)
		status  int
		body    string
		header  map[string][]string // nil value: the field must be absent
		// writeErrs are the errors the handler's Write calls returned, in order.
		writeErrs []error
		closes    bool // the server closes after this response
	}{
		{name: "body without Content-Length gets one",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				_, _ = io.WriteString(w, "hel")
				_, _ = io.WriteString(w, "lo")
			},
			status: 200, body: "hello",
			header: map[string][]string{"Content-Length": {"5"}, "Content-Type": {"text/plain; charset=utf-8"}}},
		// net/http drops an invalid Content-Length and falls back to
		// chunked encoding; the lane never chunks, so it drops the value
		// and sends the one length it computed (regression: it used to
		// send both, which clients refuse).
		{name: "invalid Content-Length replaced",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Content-Length", "five")
				_, _ = io.WriteString(w, "hello")
			},
			status: 200, body: "hello", header: map[string][]string{"Content-Length": {"5"}}},
		{name: "negative Content-Length replaced",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Content-Length", "-1")
				_, _ = io.WriteString(w, "hello")
			},
			status: 200, body: "hello", header: map[string][]string{"Content-Length": {"5"}}},
		{name: "serialized fields with a small body",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("X-Map", "m")
				w.Header().Set("Content-Length", "99") // the length given wins
				w.(fieldsWriter).WriteHeaderFields(http.StatusOK, []byte("Etag: \"e\"\r\nContent-Type: text/x-fields\r\n"), 5)
				w.Header().Set("X-Late", "after the head") // not sent, as after WriteHeader
				_, err := io.WriteString(w, "hello")
				errs <- err
			},
			status: 200, body: "hello", writeErrs: []error{nil},
			header: map[string][]string{"Content-Length": {"5"}, "Content-Type": {"text/x-fields"}, "Etag": {`"e"`},
				"X-Map": {"m"}, "X-Late": nil}},
		{name: "serialized fields with a large body",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.(fieldsWriter).WriteHeaderFields(http.StatusOK, []byte("Content-Type: text/plain\r\n"), int64(len(big)))
				_, err := io.WriteString(w, big)
				errs <- err
			},
			status: 200, body: big, writeErrs: []error{nil},
			header: map[string][]string{"Content-Length": {"70000"}, "Content-Type": {"text/plain"}}},
		{name: "serialized fields for HEAD", method: "HEAD",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.(fieldsWriter).WriteHeaderFields(http.StatusOK, []byte("Content-Type: text/plain\r\n"), 12)
			},
			status: 200, header: map[string][]string{"Content-Length": {"12"}, "Content-Type": {"text/plain"}}},
		{name: "serialized fields after WriteHeader are ignored",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.WriteHeader(http.StatusAccepted)
				w.(fieldsWriter).WriteHeaderFields(http.StatusOK, []byte("X-Ignored: yes\r\n"), 0)
			},
			status: 202, header: map[string][]string{"Content-Length": {"0"}, "X-Ignored": nil}},
		{name: "nothing written",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {},
			status:  200, header: map[string][]string{"Content-Length": {"0"}, "Content-Type": nil}},
		{name: "status only",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) { w.WriteHeader(http.StatusAccepted) },
			status:  202, header: map[string][]string{"Content-Length": {"0"}}},
		{name: "HEAD keeps the handler's Content-Length and sends no body", method: "HEAD",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Content-Length", "5")
				w.Header().Set("Content-Type", "text/plain")
			},
			status: 200, header: map[string][]string{"Content-Length": {"5"}, "Content-Type": {"text/plain"}}},
		{name: "HEAD with the body written", method: "HEAD",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				_, err := io.WriteString(w, "<html>hello</html>")
				errs <- err
			},
			status: 200, writeErrs: []error{nil},
			header: map[string][]string{"Content-Length": {"18"}, "Content-Type": {"text/html; charset=utf-8"}}},
		{name: "HEAD with Content-Length and a large body written", method: "HEAD",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Content-Length", "70000")
				_, err := io.WriteString(w, big)
				errs <- err
			},
			status: 200, writeErrs: []error{nil}, header: map[string][]string{"Content-Length": {"70000"}}},
		{name: "304 has no body",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Etag", `"v1"`)
				w.WriteHeader(http.StatusNotModified)
				_, err := io.WriteString(w, "x")
				errs <- err
			},
			status: 304, writeErrs: []error{http.ErrBodyNotAllowed},
			header: map[string][]string{"Etag": {`"v1"`}, "Content-Length": nil, "Content-Type": nil}},
		{name: "204 has no body",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.WriteHeader(http.StatusNoContent)
				_, err := io.WriteString(w, "x")
				errs <- err
			},
			status: 204, writeErrs: []error{http.ErrBodyNotAllowed},
			header: map[string][]string{"Content-Length": nil, "Content-Type": nil}},
		{name: "explicit Content-Type kept",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, "<html>")
			},
			status: 200, body: "<html>", header: map[string][]string{"Content-Type": {"application/json"}}},
		{name: "HTML sniffed",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				_, _ = io.WriteString(w, "<!DOCTYPE html><p>x")
			},
			status: 200, body: "<!DOCTYPE html><p>x", header: map[string][]string{"Content-Type": {"text/html; charset=utf-8"}}},
		{name: "LF in a value becomes a space",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header()["X-A"] = []string{"a\nb"}
			},
			status: 200, header: map[string][]string{"X-A": {"a b"}}},
		{name: "CRLF in a value cannot inject a field",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header()["X-A"] = []string{"a\r\nInjected: 1"}
				w.Header()["X-B"] = []string{" padded \t"}
			},
			status: 200, header: map[string][]string{"X-A": {"a  Injected: 1"}, "Injected": nil, "X-B": {"padded"}}},
		{name: "invalid names dropped",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				for _, k := range []string{"Bad Name", "X:Y", "", "X\r\nInjected", "Caf\xc3\xa9"} {
					w.Header()[k] = []string{"v"}
				}
				w.Header()["X-Good"] = []string{"v"}
			},
			status: 200, header: map[string][]string{"Bad Name": nil, "X": nil, "Injected": nil, "X-Good": {"v"}}},
		{name: "Date added",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {},
			status:  200},
		{name: "handler's Date kept",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Date", customDate)
			},
			status: 200, header: map[string][]string{"Date": {customDate}}},
		{name: "several values of one field",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Add("Vary", "Accept-Encoding")
				w.Header().Add("Vary", "Authorization")
			},
			status: 200, header: map[string][]string{"Vary": {"Accept-Encoding", "Authorization"}}},
		{name: "write beyond Content-Length",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Content-Length", "2")
				_, err := io.WriteString(w, "abc")
				errs <- err
				_, err = io.WriteString(w, "ab")
				errs <- err
				_, err = io.WriteString(w, "c")
				errs <- err
			},
			status: 200, body: "ab", writeErrs: []error{http.ErrContentLength, nil, http.ErrContentLength},
			header: map[string][]string{"Content-Length": {"2"}}},
		{name: "large body with Content-Length",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Content-Length", "70000")
				_, err := io.WriteString(w, big)
				errs <- err
			},
			status: 200, body: big, writeErrs: []error{nil}, header: map[string][]string{"Content-Length": {"70000"}}},
		{name: "large body in small writes with Content-Length",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Content-Length", "70000")
				for i := 0; i < len(big); i += 700 {
					_, _ = io.WriteString(w, big[i:i+700])
				}
			},
			status: 200, body: big, header: map[string][]string{"Content-Length": {"70000"}}},
		{name: "large body without Content-Length gets one",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				for i := 0; i < len(big); i += 10000 {
					_, _ = io.WriteString(w, big[i:i+10000])
				}
			},
			status: 200, body: big, header: map[string][]string{"Content-Length": {"70000"}}},
		{name: "status without text",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) { w.WriteHeader(599) },
			status:  599},
		{name: "second WriteHeader ignored",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.WriteHeader(http.StatusCreated)
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, "x")
			},
			status: 201, body: "x"},
		{name: "Write implies 200",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				_, _ = io.WriteString(w, "x")
				w.WriteHeader(http.StatusInternalServerError)
			},
			status: 200, body: "x"},
		{name: "short body closes the connection",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Content-Length", "10")
				_, _ = io.WriteString(w, "abc")
			},
			status: 200, body: "abc", closes: true},
		{name: "short large body closes the connection",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Content-Length", "70001")
				_, _ = io.WriteString(w, big)
			},
			status: 200, body: big, closes: true},
		{name: "client sends Connection: close", extra: "Connection: close\r\n",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) { _, _ = io.WriteString(w, "x") },
			status:  200, body: "x", closes: true},
		{name: "handler sets Connection: close",
			handler: func(w http.ResponseWriter, r *http.Request, errs chan<- error) {
				w.Header().Set("Connection", "close")
				_, _ = io.WriteString(w, "x")
			},
			status: 200, body: "x", closes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			errs := make(chan error, len(tc.writeErrs))
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/next" {
					_, _ = io.WriteString(w, "next")
					return
				}
				tc.handler(w, r, errs)
			})
			ls := startLane(t, h, nil)
			c := dial(t, ls.addr)
			c.send(method + " / HTTP/1.1\r\nHost: x\r\n" + tc.extra + "\r\n")
			resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
			if err != nil {
				t.Fatalf("read response: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			if tc.closes && err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("read body: got %v; want the body or an unexpected EOF", err)
			} else if !tc.closes && err != nil {
				t.Fatalf("read body: %v", err)
			}
			if resp.StatusCode != tc.status {
				t.Errorf("got status %d; want %d", resp.StatusCode, tc.status)
			}
			if string(body) != tc.body {
				t.Errorf("got body %.80q (%d bytes); want %.80q (%d bytes)", body, len(body), tc.body, len(tc.body))
			}
			for k, want := range tc.header {
				if got := resp.Header[k]; !equalStrings(got, want) {
					t.Errorf("%s: got %q; want %q", k, got, want)
				}
			}
			if _, ok := tc.header["Date"]; !ok {
				if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
					t.Errorf("Date %q: %v", resp.Header.Get("Date"), err)
				}
			}
			for i, want := range tc.writeErrs {
				if got := <-errs; !errors.Is(got, want) {
					t.Errorf("Write %d: got %v; want %v", i, got, want)
				}
			}
			if tc.closes {
				if rest := c.waitClosed(); len(rest) != 0 {
					t.Errorf("after the response: got %q; want the connection closed", rest)
				}
				return
			}
			if resp.Close {
				t.Error("response says Connection: close; want the connection kept")
			}
			c.send("GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			resp, body2 := c.read("GET")
			if body2 != "next" || !resp.Close {
				t.Errorf("next request: got %q close %v; want \"next\" with Connection: close", body2, resp.Close)
			}
			if rest := c.waitClosed(); len(rest) != 0 {
				t.Errorf("after Connection: close: got %q; want the connection closed", rest)
			}
		})
	}
}

// TestResponseWriterMatchesNetHTTP runs the same handlers on the lane and
// on net/http alone: status, body, Close and every header but an added
// Date must agree.
func TestResponseWriterMatchesNetHTTP(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, "hello, hello, hello")
	_ = zw.Close()
	html := "<html><body>" + strings.Repeat("x", 5000)

	for _, tc := range []struct {
		name    string
		method  string
		extra   string
		handler http.HandlerFunc
	}{
		{name: "plain text", handler: func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") }},
		{name: "JSON with type and length", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "2")
			_, _ = io.WriteString(w, "{}")
		}},
		{name: "nothing written", handler: func(w http.ResponseWriter, r *http.Request) {}},
		{name: "HTML sniffed", handler: func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "<html><p>x") }},
		{name: "http.Error", handler: func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", http.StatusNotFound) }},
		{name: "http.Redirect", handler: func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/there?a=b", http.StatusFound) }},
		{name: "status without text", handler: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(599) }},
		{name: "handler's Date", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Date", "Mon, 01 Jan 2001 00:00:00 GMT")
		}},
		{name: "header sanitizing", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header()["X-A"] = []string{"a\r\nInjected: 1", " b "}
			w.Header()["Bad Name"] = []string{"v"}
		}},
		{name: "HEAD with Content-Length", method: "HEAD", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5")
		}},
		{name: "HEAD with a body written", method: "HEAD", handler: func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "<html>hello</html>")
		}},
		{name: "304 with validators", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Etag", `"v1"`)
			w.Header().Set("Cache-Control", "max-age=60")
			w.WriteHeader(http.StatusNotModified)
		}},
		{name: "client sends Connection: close", extra: "Connection: close\r\n",
			handler: func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "x") }},

		// Where the lane's writer departs from net/http's.

		// net/http: "for HEAD, the handler should either write the
		// Content-Length or write non-zero bytes. If it's actually 0 bytes
		// and the handler never looked at the Request.Method, we just don't
		// send a Content-Length header."
		{name: "HEAD with nothing written", method: "HEAD", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
		}},
		// net/http does not sniff a body with a Content-Encoding.
		{name: "Content-Encoding without Content-Type", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(gz.Bytes())
		}},
		// net/http sends the header as it was at WriteHeader.
		{name: "header changed after WriteHeader", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Early", "1")
			w.WriteHeader(http.StatusOK)
			w.Header().Set("X-Late", "1")
			w.Header().Del("X-Early")
			_, _ = io.WriteString(w, "x")
		}},
		// net/http sniffs the first buffered chunk, not just the first write.
		{name: "sniffing sees more than a small first write", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(len(html)))
			_, _ = io.WriteString(w, html[:4])
			_, _ = io.WriteString(w, html[4:])
		}},
		// net/http strips Content-Length and Content-Type from a 304 and
		// Content-Length from a 204 (RFC 9110 forbids it there).
		{name: "304 with entity headers", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1234")
			w.WriteHeader(http.StatusNotModified)
		}},
		{name: "204 with Content-Length", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusNoContent)
		}},
		// net/http says Connection: close when it closes, whatever the
		// handler put in Connection.
		{name: "client closes, handler says keep-alive", extra: "Connection: close\r\n",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Connection", "keep-alive")
				_, _ = io.WriteString(w, "x")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			raw := method + " / HTTP/1.1\r\nHost: x\r\n" + tc.extra + "\r\n"
			ls := startLane(t, tc.handler, nil)
			got := fetch(t, ls.addr, raw, method)
			want := fetch(t, startPlain(t, tc.handler, nil), raw, method)
			if n := ls.handedOff.Load(); n != 0 {
				t.Fatalf("handed-off connections: got %d; want 0", n)
			}
			if got.err != want.err {
				t.Fatalf("got response error %q; want (net/http) %q", got.err, want.err)
			}
			if got.status != want.status || got.body != want.body || got.close != want.close {
				t.Errorf("got %q close %v body %.60q\nwant (net/http) %q close %v body %.60q",
					got.status, got.close, got.body, want.status, want.close, want.body)
			}
			if g, w := got.header.Get("Date") != "", want.header.Get("Date") != ""; g != w {
				t.Errorf("Date present: got %v; want (net/http) %v", g, w)
			}
			if got.header.Get("Date") != want.header.Get("Date") { // the handler's own is kept
				got.header.Del("Date")
				want.header.Del("Date")
			}
			for _, k := range unionKeys(got.header, want.header) {
				if g, w := got.header[k], want.header[k]; !equalStrings(g, w) {
					t.Errorf("%s: got %q; want (net/http) %q", k, g, w)
				}
			}
		})
	}
}

// fetched is one response, or the error reading it.
type fetched struct {
	status string
	header http.Header
	body   string
	close  bool
	err    string
}

func fetch(t *testing.T, addr, raw, method string) fetched {
	t.Helper()
	c := dial(t, addr)
	c.send(raw)
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		return fetched{err: err.Error()}
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fetched{err: "body: " + err.Error()}
	}
	// ReadResponse moves these out of Header; put them back to compare.
	if resp.Close {
		resp.Header.Set("Connection", "close")
	}
	return fetched{status: resp.Status, header: resp.Header, body: string(body), close: resp.Close}
}

func unionKeys(a, b http.Header) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// TestWriteHeaderInvalidCode: WriteHeader panics on a code that is not
// three digits, as net/http's does, on the lane as well.
func TestWriteHeaderInvalidCode(t *testing.T) {
	for _, code := range []int{0, 99, 1000, 12345, -200} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			panicked := make(chan bool, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() { panicked <- recover() != nil }()
				w.WriteHeader(code)
			})
			for _, srv := range []struct {
				name string
				addr string
			}{
				{"net/http", startPlain(t, h, nil)},
				{"lane", startLane(t, h, nil).addr},
			} {
				c := dial(t, srv.addr)
				c.send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				if !<-panicked {
					t.Errorf("%s: WriteHeader(%d) did not panic; want a panic", srv.name, code)
				}
				_, _ = io.ReadAll(c.br)
			}
		})
	}
}

// fieldsWriter is the lane writer's WriteHeaderFields, as a handler finds it.
type fieldsWriter interface {
	WriteHeaderFields(code int, fields []byte, contentLength int64)
}

// TestWriteHeaderFieldsRefusesWhatItCannotFrame: a status without a body,
// or a negative length, panics, since the fields are written unchecked and
// the length is sent as given.
func TestWriteHeaderFieldsRefusesWhatItCannotFrame(t *testing.T) {
	for _, tc := range []struct {
		code int
		n    int64
	}{{http.StatusNotModified, 0}, {http.StatusNoContent, 0}, {http.StatusOK, -1}, {99, 0}} {
		t.Run(fmt.Sprintf("%d %d", tc.code, tc.n), func(t *testing.T) {
			panicked := make(chan bool, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() { panicked <- recover() != nil }()
				w.(fieldsWriter).WriteHeaderFields(tc.code, nil, tc.n)
			})
			c := dial(t, startLane(t, h, nil).addr)
			c.send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			if !<-panicked {
				t.Errorf("WriteHeaderFields(%d, nil, %d) did not panic; want a panic", tc.code, tc.n)
			}
			_, _ = io.ReadAll(c.br)
		})
	}
}
