package h1_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"trendgate/internal/transport/h1"
)

// BenchmarkServe sends one keep-alive request after another over loopback
// to a handler that answers with a fixed body, served by net/http alone and
// by the lane in front of it. It measures the whole round trip, client
// included, so the difference between the two is the servers'. TestMain's
// second pass serves the lane on two event loops: there each request
// crosses from the loop's thread, asleep in the kernel, to the client's
// goroutine in Go's poller and back, which one connection's ping-pong in
// one process pays in full (about 32 against 19 µs a request on the
// development machine); bench/openloop measures the loops as clients see
// them, from another process over many connections.
func BenchmarkServe(b *testing.B) {
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
				addr := benchServe(b, h, lane)
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				br := bufio.NewReaderSize(conn, 64<<10)
				req := []byte("GET /api4/public/topics/list/v1 HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer bench-key\r\n\r\n")
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := conn.Write(req); err != nil {
						b.Fatal(err)
					}
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						b.Fatal(err)
					}
					n, _ := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || n != int64(size) {
						b.Fatalf("got %d with %d bytes; want 200 with %d", resp.StatusCode, n, size)
					}
				}
			})
		}
	}
}

// benchServe serves h on a loopback port until the benchmark ends.
func benchServe(b *testing.B, h http.Handler, lane bool) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	fallback := &http.Server{Handler: h}
	var srv interface {
		Serve(net.Listener) error
		Shutdown(context.Context) error
	} = fallback
	if lane {
		srv = &h1.Server{Handler: h, Fallback: fallback, Loops: testLoops} // the second pass: on loops
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	b.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-done
	})
	return l.Addr().String()
}
