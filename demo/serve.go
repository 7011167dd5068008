package demo

import (
	"net"
	"net/http"
	"time"
)

// ServeLoopback serves s on a new listener on a free 127.0.0.1 port in
// the background, as demo mode and the benchmarks run it beside a
// gateway. It returns the base URL ("http://127.0.0.1:PORT") and a func
// that stops serving (closing its connections); s itself stays open.
func (s *Server) ServeLoopback() (baseURL string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}
