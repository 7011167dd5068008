package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"reflect"
	"testing"
)

// FuzzParseHead checks the lane's promise: whatever parseHead serves,
// http.ReadRequest reads the same way (method, target, host, fields,
// close, no body), so a request never means one thing on the lane and
// another on net/http.
func FuzzParseHead(f *testing.F) {
	for _, seed := range []string{
		// The minimum the lane serves.
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		// A real API request: escaped path, query, credentials.
		"GET /api4/public/topic/%23ai/time-series/v1?bucket=day HTTP/1.1\r\n" +
			"Host: 127.0.0.1:8080\r\nAuthorization: Bearer tg_x\r\nAccept-Encoding: gzip\r\n\r\n",
		// HEAD, lower-case names, duplicate fields, Connection: close.
		"HEAD /x HTTP/1.1\r\nhost: a\r\nx-a: 1\r\nX-A: 2\r\nconnection: close\r\n\r\n",
		// Connection: keep-alive in another case.
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n",
		// Value trimming: spaces and tabs on both sides, inner ones kept.
		"GET / HTTP/1.1\r\nHost: x\r\nA:\t v  w \t\r\nB:\r\n\r\n",
		// obs-text in a value.
		"GET / HTTP/1.1\r\nHost: x\r\nA: \x80\xff\r\n\r\n",
		// Raw '#' in the target, IPv6 host, empty-ish query.
		"GET /a#b? HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
		// Percent escapes, including an escaped slash and a bad one.
		"GET /a%2Fb/%41?q=%zz HTTP/1.1\r\nHost: x\r\n\r\n",
		// Double slash: must stay a path, not an authority.
		"GET //evil.example/x HTTP/1.1\r\nHost: x\r\n\r\n",
		// Empty Host value.
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
		// A pipelined request after the head.
		"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n",
		// Body framing fields the lane must refuse.
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
		// obs-fold.
		"GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n c\r\n\r\n",
		// Bare LF.
		"GET / HTTP/1.1\nHost: x\n\n",
		// Leading empty line.
		"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		// Absolute-form target with a Host that disagrees.
		"GET http://a/x HTTP/1.1\r\nHost: b\r\n\r\n",
		// Pragma: no-cache without Cache-Control, which net/http reads as
		// Cache-Control: no-cache too. Fails while the lane reads it as is.
		"GET / HTTP/1.1\r\nHost: x\r\nPragma: no-cache\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkAgainstReadRequest(t, in)
	})
}

// TestParseHeadAgreesWithReadRequest runs FuzzParseHead's check on the
// heads of TestParseHeadLane, so it holds without fuzzing too.
func TestParseHeadAgreesWithReadRequest(t *testing.T) {
	for _, tc := range laneCases {
		t.Run(tc.name, func(t *testing.T) {
			checkAgainstReadRequest(t, []byte(tc.in))
		})
	}
}

// checkAgainstReadRequest fails t when parseHead serves in and net/http
// reads its head differently.
func checkAgainstReadRequest(t *testing.T, in []byte) {
	t.Helper()
	h, n, v := parseHead(in, nil)
	if v != lane {
		if n != 0 {
			t.Fatalf("%q: verdict %d with n %d; want n 0", in, v, n)
		}
		return
	}
	if n <= 0 || n > len(in) {
		t.Fatalf("%q: n %d out of range", in, n)
	}
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(in[:n])))
	if err != nil {
		t.Fatalf("lane serves %q; net/http: %v", in[:n], err)
	}
	if r.Method != h.method || r.RequestURI != h.target || r.Host != h.host {
		t.Errorf("%q: got lane %q %q host %q; want net/http's %q %q host %q",
			in[:n], h.method, h.target, h.host, r.Method, r.RequestURI, r.Host)
	}
	if r.ContentLength != 0 || r.Close != h.close {
		t.Errorf("%q: got lane close %v; want net/http's close %v (and ContentLength %d, want 0)",
			in[:n], h.close, r.Close, r.ContentLength)
	}
	if h.url.String() != r.URL.String() || h.url.RawPath != r.URL.RawPath || h.url.RawQuery != r.URL.RawQuery {
		t.Errorf("%q: got lane URL %#v; want net/http's %#v", in[:n], h.url, r.URL)
	}
	laneHeader := http.Header{}
	for _, f := range h.fields {
		laneHeader[f.name] = append(laneHeader[f.name], f.value)
	}
	if !reflect.DeepEqual(laneHeader, r.Header) {
		t.Errorf("%q: got lane header %q; want net/http's %q", in[:n], laneHeader, r.Header)
	}
}
