package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"trendgate/auth"
	"trendgate/demo"
	"trendgate/internal/testing/h2test"
	"trendgate/internal/testing/syncbuf"
	"trendgate/internal/testing/testcert"
)

// childEnv, set to 1, makes the test binary run trendgate's main instead
// of the tests: TestServeDrainsHTTP2Abuse runs "trendgate serve" as a
// child process that way and sends it real signals.
const childEnv = "TRENDGATE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		main() // exits non-zero on an error
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// drainConfig is the served configuration: HTTPS on public with short
// timeouts (write_timeout below shutdown_timeout, so no write a client
// withholds can outlast the drain), one full-plan key that meets no limit.
const drainConfig = `server:
  listen: %[1]s
  read_header_timeout: 1s
  read_timeout: 1s
  write_timeout: 1s
  idle_timeout: 1s
  shutdown_timeout: %[2]s
  fast_http1: %[8]t
  fast_http2: %[7]t
tls:
  mode: files
  cert_file: %[3]s
  key_file: %[4]s
  http_listen: 127.0.0.1:0
admin:
  listen: "off"
log:
  level: info
upstream:
  base_url: %[5]s
  api_key: upstream-test-credential
keys:
  - id: abuser
    sha256: %[6]s
    plan: full
    per_second: 1000000000
    burst: 1000000000
    daily: 1000000000000
    monthly: 1000000000000
`

// TestServeDrainsHTTP2Abuse runs "trendgate serve" with TLS as a child
// process, leaves HTTP/2 connections open in the middle of an attack, and
// sends SIGTERM: the process must exit with status 0 (the drain completed,
// no connection held it) within server.shutdown_timeout. Each attack gets
// a process of its own, so a failure names the one that held the drain:
// with the HTTP/2 lane, with Go's HTTP/2 behind the HTTP/1.1 lane's
// handshake (fast_http2: false), and with net/http serving all (both off).
func TestServeDrainsHTTP2Abuse(t *testing.T) {
	const shutdownTimeout = 5 * time.Second
	const listPath = "/api4/public/topics/list/v1"
	up, err := demo.New(demo.Options{APIKey: "upstream-test-credential"})
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); upSrv.Close() })
	cert := testcert.New(t, testcert.Options{})
	certFile, keyFile := cert.Write(t, t.TempDir())
	clientTLS := &tls.Config{RootCAs: cert.Pool(), ServerName: "tg.test"}

	attacks := []struct {
		name string
		// leave opens a connection and leaves it in the middle of the
		// attack.
		leave func(t *testing.T, addr, key string)
	}{
		{"idle connection", func(t *testing.T, addr, _ string) {
			h2test.Dial(t, addr, clientTLS).Handshake()
		}},
		{"zero-window stall", func(t *testing.T, addr, key string) {
			c := h2test.Dial(t, addr, clientTLS)
			c.Handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			c.WriteRequest(c.NextStreamID(), c.Encode(h2test.GET("tg.test", listPath, key)...), true)
			c.MustFlush()
		}},
		{"header block never ended", func(t *testing.T, addr, key string) {
			c := h2test.Dial(t, addr, clientTLS)
			c.Handshake()
			if err := c.Framer.WriteHeaders(http2.HeadersFrameParam{
				StreamID: c.NextStreamID(), BlockFragment: c.Encode(h2test.GET("tg.test", listPath, key)...), EndStream: true,
			}); err != nil {
				t.Fatal(err)
			}
			c.MustFlush()
		}},
		{"rapid reset", func(t *testing.T, addr, key string) {
			c := h2test.Dial(t, addr, clientTLS)
			c.Handshake()
			block := c.Encode(h2test.GET("tg.test", listPath, key)...)
			for range 2000 {
				id := c.NextStreamID()
				c.WriteRequest(id, block, true)
				_ = c.Framer.WriteRSTStream(id, http2.ErrCodeCancel)
			}
			_ = c.Flush() // the server may end the connection: as good
		}},
		{"PING flood, unread", func(t *testing.T, addr, _ string) {
			c := h2test.Dial(t, addr, clientTLS)
			c.Handshake()
			for i := range 50_000 {
				_ = c.Framer.WritePing(false, [8]byte{byte(i), byte(i >> 8)})
			}
			_ = c.Flush()
		}},
		{"slow read", func(t *testing.T, addr, key string) {
			// As many streams as allowed of a 61 KB answer, windows wide
			// open: far more than the socket buffers hold.
			c := h2test.Dial(t, addr, clientTLS)
			settings := c.Handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
			_ = c.Framer.WriteWindowUpdate(0, 1<<31-1-65535)
			streams := uint32(250)
			if v, ok := settings[http2.SettingMaxConcurrentStreams]; ok {
				streams = min(streams, v)
			}
			block := c.Encode(h2test.GET("tg.test", "/api4/public/topic/bitcoin/time-series/v1", key)...)
			for range streams {
				c.WriteRequest(c.NextStreamID(), block, true)
			}
			// Every stream is accepted before the signal (the ACK is
			// read, and with it at most the little DATA written before it).
			if !c.Ping([8]byte{'s', 'l', 'o', 'w'}, 10*time.Second) {
				t.Fatal("no PING ACK behind the requests")
			}
		}},
	}
	for _, lane := range []struct {
		name         string
		fast1, fast2 bool
	}{{"lane", true, true}, {"net-http", true, false}, {"net-http-only", false, false}} {
		for _, a := range attacks {
			t.Run(lane.name+"/"+a.name, func(t *testing.T) {
				t.Parallel()
				key, err := auth.Generate()
				if err != nil {
					t.Fatal(err)
				}
				addr := freeLoopbackPort(t)
				dir := t.TempDir()
				cfgFile := filepath.Join(dir, "trendgate.yaml")
				yaml := fmt.Sprintf(drainConfig, addr, shutdownTimeout, certFile, keyFile, upSrv.URL, auth.Digest(key), lane.fast2, lane.fast1)
				if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
					t.Fatal(err)
				}
				logs := &syncbuf.Buffer{}
				cmd := exec.Command(os.Args[0], "serve", "-config", cfgFile, "-watch", "0")
				cmd.Env = append(os.Environ(), childEnv+"=1")
				cmd.Stdout, cmd.Stderr = logs, logs
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				exited := make(chan error, 1)
				go func() { exited <- cmd.Wait() }()
				t.Cleanup(func() {
					if cmd.ProcessState == nil {
						_ = cmd.Process.Kill()
						<-exited
					}
					if t.Failed() {
						t.Logf("trendgate serve's log:\n%s", logs.String())
					}
				})
				awaitTLS(t, addr, clientTLS, exited)
				// A request that works, so every attack meets a warm cache.
				c := h2test.Dial(t, addr, clientTLS)
				c.Handshake()
				if r := c.Get("tg.test", listPath, key); r.Status != 200 {
					t.Fatalf("GET %s: status %d", listPath, r.Status)
				}

				a.leave(t, addr, key)
				start := time.Now()
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				var waitErr error
				select {
				case waitErr = <-exited:
				case <-time.After(shutdownTimeout + 10*time.Second): // only ends a broken test
					t.Fatalf("trendgate serve still running %v after SIGTERM; want an exit within server.shutdown_timeout %v", time.Since(start).Round(time.Millisecond), shutdownTimeout)
				}
				took := time.Since(start)
				t.Logf("exited %v after SIGTERM (%v)", took.Round(time.Millisecond), waitErr)
				if waitErr != nil {
					t.Errorf("trendgate serve after SIGTERM: %v; want exit status 0 (the drain completed)", waitErr)
				}
				// The drain is bounded by shutdown_timeout; what follows it
				// (the cache closed, the log flushed, the exit) gets a second.
				if took > shutdownTimeout+time.Second {
					t.Errorf("trendgate serve took %v to exit after SIGTERM; want the drain within server.shutdown_timeout %v", took, shutdownTimeout)
				}
				if !strings.Contains(logs.String(), "shutting down: draining in-flight requests") {
					t.Errorf("no drain log line")
				}
			})
		}
	}
}

// freeLoopbackPort returns a loopback address that was free a moment ago
// (the child binds it next; a collision fails the start, not the drain).
func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// awaitTLS waits (bounded) until addr completes a TLS handshake, failing
// the test if the child exits first.
func awaitTLS(t *testing.T, addr string, cfg *tls.Config, exited <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d := &net.Dialer{Timeout: time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case werr := <-exited:
			t.Fatalf("trendgate serve exited during start: %v", werr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("trendgate serve did not accept TLS on %s within 30s: %v", addr, err)
		}
		var op *net.OpError
		if !errors.As(err, &op) {
			t.Fatalf("TLS to %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a child process, not waiting for time to pass
	}
}
