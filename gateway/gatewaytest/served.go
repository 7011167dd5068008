package gatewaytest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/internal/clock"

	"trendgate/internal/testing/syncbuf"
	"trendgate/internal/testing/testcert"
)

// Served is a gateway whose Serve call the test controls: stop cancels its
// context and returns Serve's result.
type Served struct {
	t       testing.TB
	Gateway *gateway.Gateway
	Config  *config.Config
	Key     string // a full-plan key
	Public  string // host:port of the public listener
	Plain   string // host:port of the plain-HTTP listener ("" with TLS off)
	Admin   string // base URL of the admin listener
	Logs    *syncbuf.Buffer
	Cancel  context.CancelFunc
	done    chan error
	err     error // Serve's result, set by stop
	halted  bool
}

// StartGateway builds a gateway in front of upstreamURL (the demo upstream
// with key upstreamKey) and runs Serve on random loopback ports. mutate may
// change the config first. The gateway is stopped when the test ends.
func StartGateway(t testing.TB, upstreamURL string, clk clock.Clock, mutate func(*config.Config)) *Served {
	t.Helper()
	s := &Served{t: t, Key: NewKey(t)}
	cfg := BaseConfig(upstreamURL, s.Key, "")
	cfg.Log.Level = config.Default().Log.Level
	if mutate != nil {
		mutate(cfg)
	}
	s.Config = cfg
	gw, logs := Build(t, clk, cfg)
	s.Gateway, s.Logs = gw, logs
	ls := gateway.Listeners{Public: ListenLoopback(t), Admin: ListenLoopback(t)}
	if cfg.TLS.Mode == config.TLSModeFiles || cfg.TLS.Mode == config.TLSModeACME {
		ls.HTTP = ListenLoopback(t)
		s.Plain = ls.HTTP.Addr().String()
	}
	s.Public, s.Admin = ls.Public.Addr().String(), "http://"+ls.Admin.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	s.Cancel, s.done = cancel, make(chan error, 1)
	go func() { s.done <- gw.Serve(ctx, ls) }()
	t.Cleanup(func() {
		if err := s.Stop(30 * time.Second); err != nil {
			t.Errorf("serve: %v", err)
		}
		_ = gw.Close()
	})
	return s
}

// Stop cancels Serve's context and waits up to bound for it to return.
func (s *Served) Stop(bound time.Duration) error {
	if s.halted {
		return s.err
	}
	s.Cancel()
	select {
	case s.err = <-s.done:
	case <-time.After(bound):
		s.err = fmt.Errorf("Serve did not return within %v", bound)
	}
	s.halted = true
	return s.err
}

func ListenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// StartUpstream serves the demo upstream on a loopback httptest server;
// wrap, when not nil, wraps its handler.
func StartUpstream(t testing.TB, clk clock.Clock, wrap func(http.Handler) http.Handler) (*demo.Server, *httptest.Server) {
	t.Helper()
	up, err := demo.New(demo.Options{Clock: clk, APIKey: UpstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = up
	if wrap != nil {
		h = wrap(up)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { up.Close(); srv.Close() })
	return up, srv
}

// HttpsGateways starts one fake clock, one demo upstream and one
// self-signed certificate (for tg.test), then, for each mutate, a gateway
// serving HTTPS with that certificate in front of that upstream (mutate
// applied after the TLS settings). It returns the gateways, in order, and
// the pool that trusts the certificate.
func HttpsGateways(t *testing.T, mutates ...func(*config.Config)) ([]*Served, *x509.CertPool) {
	t.Helper()
	clk := clock.NewFake(Now)
	_, upSrv := StartUpstream(t, clk, nil)
	certFile, keyFile, pool := SelfSigned(t, t.TempDir())
	gws := make([]*Served, len(mutates))
	for i, mutate := range mutates {
		gws[i] = StartGateway(t, upSrv.URL, clk, func(c *config.Config) {
			c.TLS.Mode = config.TLSModeFiles
			c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
			mutate(c)
		})
	}
	return gws, pool
}

// SelfSigned writes a self-signed ECDSA certificate for tg.test and
// 127.0.0.1 into dir and returns the file names and a pool trusting it.
func SelfSigned(t testing.TB, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	p := testcert.New(t, testcert.Options{})
	certFile, keyFile = p.Write(t, dir)
	return certFile, keyFile, p.Pool()
}

// HttpsClient trusts roots and sends serverName in the handshake; it tries
// HTTP/2 first.
func HttpsClient(roots *x509.CertPool, serverName string, minV, maxV uint16) *http.Client {
	return &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: minV, MaxVersion: maxV},
			ForceAttemptHTTP2: true,
		},
	}
}

// GetWithKey sends GET url with the API key and returns the response with
// its body read.
func GetWithKey(t testing.TB, c *http.Client, url, key string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

const ListPath = "/api4/public/topics/list/v1"

// CheckList checks the shape of a topics list answer.
func CheckList(t *testing.T, body []byte) {
	t.Helper()
	var v struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(body, &v); err != nil || len(v.Data) < 100 {
		t.Fatalf("list: %v, %d items", err, len(v.Data))
	}
	for _, f := range []string{"topic", "title", "topic_rank", "num_contributors", "num_posts", "interactions_24h"} {
		if _, ok := v.Data[0][f]; !ok {
			t.Errorf("list item lacks %s", f)
		}
	}
}
