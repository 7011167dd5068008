package h2_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"trendgate/internal/testing/testcert"
	"trendgate/internal/transport/h2"
)

// BenchmarkServe sends one request after another on one HTTP/2-over-TLS
// connection to a handler that answers with a fixed body, served by Go's
// net/http HTTP/2 and by the lane. The client is a bare Framer that does
// not decode response headers, so allocs/op is nearly all the server's.
func BenchmarkServe(b *testing.B) {
	pair := testcert.New(b, testcert.Options{Hosts: []string{"127.0.0.1"}})
	for _, size := range []int{18133, 61499} { // the bench list and series bodies
		body := bytes.Repeat([]byte("x"), size)
		clen := []string{strconv.Itoa(size)}
		ctype := []string{"application/json; charset=utf-8"}
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = ctype
			w.Header()["Content-Length"] = clen
			_, _ = w.Write(body)
		})
		for _, lane := range []bool{false, true} {
			name := "net-http/" + strconv.Itoa(size)
			if lane {
				name = "lane/" + strconv.Itoa(size)
			}
			b.Run(name, func(b *testing.B) {
				fields := append(benchFields[:len(benchFields):len(benchFields)],
					hpack.HeaderField{Name: "authorization", Value: "Bearer bench-key"})
				b.SetBytes(int64(size))
				benchRequests(b, benchServe(b, h, pair.TLS, lane), pair.Pool(), fields, size)
			})
		}
	}
}

// benchRequests sends requests of fields one after another on one
// connection to addr until the benchmark ends, each answered with size
// bytes of body, keeping the connection's window open.
func benchRequests(b *testing.B, addr string, roots *x509.CertPool, fields []hpack.HeaderField, size int) {
	conn, fr := benchDial(b, addr, roots)
	defer conn.Close()
	fr.SetReuseFrames()
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	b.ReportAllocs()
	id := uint32(1)
	for b.Loop() {
		if got := benchGet(b, fr, enc, &hbuf, fields, id); got != size {
			b.Fatalf("got %d bytes; want %d", got, size)
		}
		id += 2
		if err := fr.WriteWindowUpdate(0, uint32(size)); err != nil {
			b.Fatal(err)
		}
	}
}

// benchServe serves h over TLS with HTTP/2 on a loopback port until the
// benchmark ends: by the lane, or by net/http.
func benchServe(b *testing.B, h http.Handler, cert tls.Certificate, lane bool) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	base := &http.Server{Handler: h, TLSConfig: cfg}
	done := make(chan struct{})
	if !lane {
		go func() {
			defer close(done)
			_ = base.ServeTLS(l, "", "")
		}()
		b.Cleanup(func() {
			_ = base.Close()
			<-done
		})
		return l.Addr().String()
	}
	srv := &h2.Server{Handler: h, Base: base}
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				tc := tls.Server(c, cfg)
				if tc.Handshake() != nil {
					_ = tc.Close()
					return
				}
				srv.ServeConn(tc)
			}()
		}
	}()
	b.Cleanup(func() {
		_ = l.Close()
		<-done
		_ = srv.Shutdown(b.Context())
	})
	return l.Addr().String()
}

// BenchmarkIdleConn reports the heap an idle HTTP/2 connection keeps
// after one request of the bench list's size: by the lane and by
// net/http, client side included (a bare Framer over tls.Conn, the same
// for both), as B/conn over 100 connections.
func BenchmarkIdleConn(b *testing.B) {
	pair := testcert.New(b, testcert.Options{Hosts: []string{"127.0.0.1"}})
	body := bytes.Repeat([]byte("x"), 61499)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) })
	const conns = 100
	for _, lane := range []bool{false, true} {
		name := "net-http"
		if lane {
			name = "lane"
		}
		b.Run(name, func(b *testing.B) {
			addr := benchServe(b, h, pair.TLS, lane)
			var perConn float64
			for b.Loop() {
				before := heapInUse()
				open := make([]*tls.Conn, 0, conns)
				for range conns {
					open = append(open, idleAfterOne(b, addr, pair.Pool(), len(body)))
				}
				perConn = float64(heapInUse()-before) / conns
				for _, c := range open {
					_ = c.Close()
				}
			}
			b.ReportMetric(perConn, "B/conn")
		})
	}
}

// heapInUse returns the heap in use after two collections (the second
// empties what sync.Pools kept of the first's survivors: buffers that
// belong to no connection).
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// benchFields are the pseudo-header fields of the benchmarks' requests.
var benchFields = []hpack.HeaderField{
	{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
	{Name: ":path", Value: "/api4/public/topics/list/v1"}, {Name: ":authority", Value: "bench"},
}

// benchDial opens an HTTP/2 connection over TLS to addr and sends the
// preface and large windows (as h2load does, so flow control never
// waits).
func benchDial(b *testing.B, addr string, roots *x509.CertPool) (*tls.Conn, *http2.Framer) {
	b.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		b.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		b.Fatal(err)
	}
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<30 - 1}); err != nil {
		b.Fatal(err)
	}
	if err := fr.WriteWindowUpdate(0, 1<<30); err != nil {
		b.Fatal(err)
	}
	return conn, fr
}

// idleAfterOne opens an HTTP/2 connection to addr, reads one response of
// size bytes on it and returns it open and idle.
func idleAfterOne(b *testing.B, addr string, roots *x509.CertPool, size int) *tls.Conn {
	b.Helper()
	conn, fr := benchDial(b, addr, roots)
	var hbuf bytes.Buffer
	if got := benchGet(b, fr, hpack.NewEncoder(&hbuf), &hbuf, benchFields, 1); got != size {
		b.Fatalf("got %d bytes; want %d", got, size)
	}
	return conn
}

// benchGet sends a request of fields on stream id, coded with enc into
// hbuf, and reads frames until its response ended; it returns the
// response body's length.
func benchGet(b *testing.B, fr *http2.Framer, enc *hpack.Encoder, hbuf *bytes.Buffer, fields []hpack.HeaderField, id uint32) int {
	hbuf.Reset()
	for _, f := range fields {
		_ = enc.WriteField(f)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		b.Fatal(err)
	}
	got := 0
	for done := false; !done; {
		f, err := fr.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.DataFrame:
			if f.StreamID == id {
				got += len(f.Data())
				done = f.StreamEnded()
			}
		case *http2.WindowUpdateFrame, *http2.PingFrame:
		case *http2.HeadersFrame:
			done = f.StreamID == id && f.StreamEnded()
		default:
			b.Fatalf("unexpected %v", f.Header())
		}
	}
	return got
}

// BenchmarkHitHead serves an 18,133-byte body with the fields a cache hit
// of the gateway carries, put in the header map or written as one block
// with WriteHeaderFields (as the gateway's chain does), on one HTTP/2
// connection over TLS.
func BenchmarkHitHead(b *testing.B) {
	pair := testcert.New(b, testcert.Options{Hosts: []string{"127.0.0.1"}})
	body := bytes.Repeat([]byte("x"), 18133)
	block := []byte("Cache-Status: trendgate; hit; ttl=57\r\nEtag: \"5a1c9e0f3b7d2a64\"\r\nVary: Accept-Encoding\r\n" +
		"Cache-Control: private, max-age=57\r\nAge: 3\r\nX-Content-Type-Options: nosniff\r\n" +
		"Content-Type: application/json; charset=utf-8\r\n")
	fields := http.Header{}
	for _, line := range strings.Split(strings.TrimSuffix(string(block), "\r\n"), "\r\n") {
		k, v, _ := strings.Cut(line, ": ")
		fields[k] = []string{v}
	}
	clen := []string{strconv.Itoa(len(body))}
	requestID := []string{"req-1"}
	for _, serialized := range []bool{false, true} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h["X-Request-Id"] = requestID
			if serialized {
				w.(fieldsWriter).WriteHeaderFields(http.StatusOK, block, int64(len(body)))
			} else {
				for k, v := range fields {
					h[k] = v
				}
				h["Content-Length"] = clen
			}
			_, _ = w.Write(body)
		})
		name := "map"
		if serialized {
			name = "block"
		}
		b.Run(name, func(b *testing.B) {
			benchRequests(b, benchServe(b, h, pair.TLS, true), pair.Pool(), benchFields, len(body))
		})
	}
}
