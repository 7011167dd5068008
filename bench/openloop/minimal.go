package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"trendgate/auth"
	"trendgate/internal/rtmetrics"
)

// The minimal Go server is the ceiling a Go gateway can reach on this
// machine: one goroutine per connection, a hand-parsed HTTP/1.1 request,
// the same Bearer-key map lookup trendgate does first, and the answer's
// bytes (fetched once from the upstream at start) written with one Write.
// No cache, no limits, no metrics, no log: whatever trendgate's p99 adds
// above it is trendgate's, not Go's. It serves plain HTTP/1.1 and
// HTTP/1.1 over TLS (no HTTP/2: a minimal HTTP/2 server is no longer
// minimal), and its runtime's figures on an admin listener as trendgate
// does, so that the same per-step figures come from both.
//
// The bench runs it as a child process of its own binary (os.Args[0]
// minimal-server ...), so that its CPU time is counted apart.

const minimalCommand = "minimal-server"

// runMinimal is the child process's main; it returns only on a failure.
func runMinimal(args []string) error {
	fs := flag.NewFlagSet(minimalCommand, flag.ContinueOnError)
	var (
		plain, tlsAddr, admin, upstream, upstreamKey, digest, cert, key string
		paths                                                           string
	)
	fs.StringVar(&plain, "listen", "", "plain HTTP/1.1 address")
	fs.StringVar(&tlsAddr, "tls-listen", "", "HTTPS/1.1 address")
	fs.StringVar(&admin, "admin", "", "address of /metrics")
	fs.StringVar(&upstream, "upstream", "", "upstream base URL the answers are fetched from once")
	fs.StringVar(&upstreamKey, "upstream-key", "", "the upstream's API key")
	fs.StringVar(&digest, "key-digest", "", "SHA-256 (hex) of the one client key accepted")
	fs.StringVar(&cert, "cert", "", "certificate file")
	fs.StringVar(&key, "key", "", "private key file")
	fs.StringVar(&paths, "paths", "", "comma-separated request targets to answer")
	fullHead := fs.Bool("full-head", false, "answer with the header fields trendgate sends on a cached hit, not only the three the client needs")
	loops := fs.Int("epoll", 0, "serve plain HTTP/1.1 with this many epoll event loops (epoll.go), not a goroutine per connection")
	if err := fs.Parse(args); err != nil {
		return err
	}
	answers, err := fetchAnswers(upstream, upstreamKey, strings.Split(paths, ","), *fullHead)
	if err != nil {
		return err
	}
	s := &minimal{keys: map[string]bool{digest: true}, answers: answers}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", plain)
	if err != nil {
		return err
	}
	tln, err := tls.Listen("tcp", tlsAddr, &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(runtimePath, rtmetrics.Handler())
	// The CPU profile and the execution trace, as on trendgate's admin
	// listener, for -pprof and -trace.
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go func() { _ = http.ListenAndServe(admin, mux) }()
	go s.serve(tln)
	if *loops > 0 {
		return s.serveEpoll(ln, *loops)
	}
	return s.serve(ln)
}

// fetchAnswers asks the upstream for each target once and builds the whole
// response (status line, headers, body) the server writes for it; with
// fullHead, the head has trendgate's fields (see fullHeadFields).
func fetchAnswers(upstream, key string, targets []string, fullHead bool) (map[string][]byte, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	out := make(map[string][]byte, len(targets))
	for _, t := range targets {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, upstream+t, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("upstream %s: %s", t, resp.Status)
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\nCache-Status: trendgate; hit\r\n",
			resp.Header.Get("Content-Type"), len(body))
		if fullHead {
			b.WriteString(fullHeadFields(time.Now()))
		}
		b.WriteString("\r\n")
		b.Write(body)
		out[t] = b.Bytes()
	}
	return out, nil
}

// fullHeadFields returns the header fields trendgate adds to the three
// above on a cached hit of a plan without limits (no RateLimit fields), as
// it wrote them on 2026-11-27: a request id of 12 hex digits and a base-36
// counter, the age, the client cache policy, nosniff, a 16-character
// entity tag, Vary and the date. The values are fixed; their lengths are
// trendgate's.
func fullHeadFields(now time.Time) string {
	return "Age: 0\r\n" +
		"X-Request-Id: 8c19d5ad4220-1k3f\r\n" +
		"Cache-Control: private, max-age=599\r\n" +
		"X-Content-Type-Options: nosniff\r\n" +
		"Etag: \"r9HNnbHdeBh5OF4q\"\r\n" +
		"Vary: Accept-Encoding\r\n" +
		"Date: " + now.UTC().Format(http.TimeFormat) + "\r\n"
}

type minimal struct {
	keys    map[string]bool   // digests of the accepted keys
	answers map[string][]byte // by request target
}

var (
	minimalUnauthorized = []byte("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
	minimalNotFound     = []byte("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
)

func (s *minimal) serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go s.conn(c)
	}
}

// conn answers the requests of one keep-alive connection in turn. Request
// bodies are not expected (GET only) and not read.
func (s *minimal) conn(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, 4096)
	for {
		target, bearer, err := readRequest(r)
		if err != nil {
			return
		}
		if _, err := c.Write(s.answer(target, bearer)); err != nil {
			return
		}
	}
}

// answer returns the whole response to a request for target with the
// Bearer token bearer.
func (s *minimal) answer(target, bearer string) []byte {
	if !s.keys[auth.Digest(bearer)] {
		return minimalUnauthorized
	}
	if a, ok := s.answers[target]; ok {
		return a
	}
	return minimalNotFound
}

// readRequest reads one request head and returns its target and Bearer
// token.
func readRequest(r *bufio.Reader) (target, bearer string, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return "", "", err
	}
	f := bytes.Fields(line)
	if len(f) != 3 {
		return "", "", errors.New("bad request line")
	}
	target = string(f[1])
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			return "", "", err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return target, bearer, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && strings.EqualFold(string(name), "Authorization") {
			v := bytes.TrimSpace(value)
			if len(v) > 7 && strings.EqualFold(string(v[:7]), "bearer ") {
				bearer = string(v[7:])
			}
		}
	}
}

// startMinimal starts the minimal server as a child process of this binary,
// answering the bench's endpoints; as minimal-epoll, with loops event
// loops for plain HTTP/1.1.
func startMinimal(ctx context.Context, e *env, self, name string, loops int) (*server, error) {
	addrs, err := freeAddrs(3)
	if err != nil {
		return nil, err
	}
	targets := make([]string, 0, len(endpoints))
	for _, t := range endpoints {
		targets = append(targets, t)
	}
	p, err := start(e.dir, name, self, minimalCommand,
		"-listen", addrs[0], "-tls-listen", addrs[1], "-admin", addrs[2],
		"-upstream", e.upstreamURL, "-upstream-key", e.upstreamKey, "-key-digest", auth.Digest(e.clientKey),
		"-cert", e.certFile, "-key", e.keyFile, "-paths", strings.Join(targets, ","),
		"-full-head="+strconv.FormatBool(name == "minimal-full"), "-epoll="+strconv.Itoa(loops))
	if err != nil {
		return nil, err
	}
	admin := "http://" + addrs[2]
	s := &server{name: name, plainURL: "http://" + addrs[0], tlsURL: "https://" + addrs[1],
		procs: []*process{p}, plainAdmin: admin, tlsAdmin: admin, pprof: true}
	if err := p.waitReady(ctx, e.probe, admin+runtimePath); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}
