package h1_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/internal/testing/testcert"
)

// selfSigned returns a server certificate for 127.0.0.1 and a pool that
// trusts it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	p := testcert.New(t, testcert.Options{Hosts: []string{"127.0.0.1"}})
	return p.TLS, p.Pool()
}

// startTLSLane serves h on the lane with TLS (h2 and http/1.1 offered).
func startTLSLane(t *testing.T, h http.Handler) (*laneServer, *x509.CertPool) {
	t.Helper()
	cert, pool := selfSigned(t)
	ls := startLane(t, h, func(s *http.Server) {
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
		s.ReadHeaderTimeout = guard
	})
	return ls, pool
}

func tlsClient(pool *x509.CertPool, protos ...string) *http.Client {
	return &http.Client{Timeout: guard, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, NextProtos: protos},
		ForceAttemptHTTP2: len(protos) > 0 && protos[0] == "h2",
	}}
}

// TestTLSLaneServesHTTP1 checks that HTTP/1.1 over TLS stays on the lane
// (several requests on one kept-alive connection, none handed to
// net/http), that an h2 connection is handed to net/http and served with
// HTTP/2, and that a failed handshake is logged and costs nothing else.
func TestTLSLaneServesHTTP1(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, r.Proto+" "+r.URL.Path)
	})
	ls, pool := startTLSLane(t, h)

	c := tlsClient(pool, "http/1.1")
	defer c.CloseIdleConnections()
	var local string
	for i, path := range []string{"/a", "/b", "/c"} {
		resp, err := c.Get("https://" + ls.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "HTTP/1.1 "+path {
			t.Fatalf("GET %s: %d %q; want 200 %q", path, resp.StatusCode, b, "HTTP/1.1 "+path)
		}
		if resp.TLS == nil || resp.TLS.NegotiatedProtocol != "http/1.1" {
			t.Fatalf("GET %s: TLS state %+v; want http/1.1", path, resp.TLS)
		}
		if i == 0 {
			local = resp.Header.Get("Date")
		}
	}
	if local == "" {
		t.Error("no Date field from the lane")
	}
	if n := ls.handedOff.Load(); n != 0 {
		t.Fatalf("%d connections handed to net/http; want 0 (HTTP/1.1 over TLS stays on the lane)", n)
	}

	h2 := tlsClient(pool, "h2", "http/1.1")
	defer h2.CloseIdleConnections()
	resp, err := h2.Get("https://" + ls.addr + "/two")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(b) != "HTTP/2.0 /two" {
		t.Fatalf("h2 client: %s %q; want HTTP/2 and the handler's body", resp.Proto, b)
	}
	if n := ls.handedOff.Load(); n != 1 {
		t.Errorf("%d connections handed to net/http; want 1 (the h2 one)", n)
	}

	// A client that does not trust the certificate fails its handshake.
	bad := tlsClient(x509.NewCertPool(), "http/1.1")
	if _, err := bad.Get("https://" + ls.addr + "/x"); err == nil {
		t.Fatal("a client without the root got an answer")
	}
	waitLog := time.Now().Add(guard)
	for !strings.Contains(ls.logs.String(), "TLS handshake error") && time.Now().Before(waitLog) {
		time.Sleep(time.Millisecond) // polling for the server goroutine's log line
	}
	if !strings.Contains(ls.logs.String(), "TLS handshake error") {
		t.Errorf("no handshake error logged; logs: %s", ls.logs.String())
	}
	if resp, err := c.Get("https://" + ls.addr + "/after"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a failed handshake: %v; want 200", err)
	} else {
		resp.Body.Close()
	}
}

// countingListener counts the writes made on the connections it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, writes: &l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestTLSLaneWritesAResponseAtOnce is a regression test: crypto/tls writes
// every record with its own write, so a 61 KB answer (head plus four
// records) took five system calls; the lane collects the records of one
// response and sends them with one.
func TestTLSLaneWritesAResponseAtOnce(t *testing.T) {
	body := strings.Repeat("0123456789abcdef", 61<<10/16)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
	})
	cert, pool := selfSigned(t)
	l := &countingListener{Listener: listen(t)}
	ls := startLaneOn(t, l, h, func(s *http.Server) {
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"},
			DynamicRecordSizingDisabled: true}
	})
	c := tlsClient(pool, "http/1.1")
	defer c.CloseIdleConnections()
	get := func() {
		resp, err := c.Get("https://" + ls.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != body {
			t.Fatalf("body of %d bytes; want %d", len(b), len(body))
		}
	}
	get() // the handshake and a first answer
	before := l.writes.Load()
	for range 3 {
		get()
	}
	if n := l.writes.Load() - before; n != 3 {
		t.Errorf("%d writes for 3 answers of 61 KB over TLS; want 3", n)
	}
}

// TestTLSStateOnEveryPath is a regression test: requests the lane served
// over TLS had a nil r.TLS, and so did requests on a connection it handed
// to net/http after reading from it (net/http sets r.TLS only on a
// *tls.Conn). Every path now carries the connection's state: the lane, a
// request with a body handed over mid-connection, and an h2 connection
// handed over whole.
func TestTLSStateOnEveryPath(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if r.TLS == nil || !r.TLS.HandshakeComplete {
			io.WriteString(w, r.Method+" no TLS state")
			return
		}
		io.WriteString(w, r.Method+" TLS "+r.TLS.NegotiatedProtocol)
	})
	ls, pool := startTLSLane(t, h)
	h1c := tlsClient(pool, "http/1.1")
	defer h1c.CloseIdleConnections()
	h2c := tlsClient(pool, "h2", "http/1.1")
	defer h2c.CloseIdleConnections()

	for _, tc := range []struct {
		name      string
		client    *http.Client
		method    string
		body      io.Reader
		want      string
		handedOff int32 // connections net/http has been given by then
	}{
		{"lane", h1c, http.MethodGet, nil, "GET TLS http/1.1", 0},
		{"handed over after a head with a body", h1c, http.MethodPost, strings.NewReader("x=1"), "POST TLS http/1.1", 1},
		{"h2, handed over whole", h2c, http.MethodGet, nil, "GET TLS h2", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "https://"+ls.addr+"/", tc.body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != tc.want {
				t.Errorf("got %q; want %q", b, tc.want)
			}
			if n := ls.handedOff.Load(); n != tc.handedOff {
				t.Errorf("%d connections handed to net/http; want %d", n, tc.handedOff)
			}
		})
	}
}
