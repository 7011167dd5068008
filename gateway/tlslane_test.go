package gateway_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/redistest"
)

// TestTLSHTTP1LaneMatchesNetHTTP sends the same HTTP/1.1-over-TLS requests
// to a gateway whose lean lane terminates TLS (server.fast_http1, the
// default) and to one where net/http serves everything, and requires the
// same status, header fields and bytes from both: cache hits and misses,
// HEAD, gzip, a limited plan, a TSV download, If-None-Match, a refused
// key, a body-carrying method the lane hands to net/http mid-connection.
// (On the lane a 200 writes its caching fields serialized, not through
// the header map: these steps hold the two ways to the same fields.) Both
// keep HSTS, and h2 clients still get HTTP/2.
func TestTLSHTTP1LaneMatchesNetHTTP(t *testing.T) {
	limitedKey := gatewaytest.NewKey(t)
	fast := func(on bool) func(*config.Config) {
		return func(c *config.Config) {
			c.TLS.HSTSMaxAge = 24 * time.Hour
			c.Server.FastHTTP1 = &on
			c.Keys = append(c.Keys, config.Key{ID: "team-limited", SHA256: auth.Digest(limitedKey), Plan: "limited"})
		}
	}
	gws, pool := gatewaytest.HttpsGateways(t, fast(true), fast(false))
	lane, std := gws[0], gws[1]

	type step struct {
		method, path, key string
		header            []string
	}
	const tsv = "/topic/bitcoin/time-series/sentiment.tsv"
	steps := func(key string) []step {
		return []step{
			{"GET", gatewaytest.ListPath, key, nil},
			{"GET", gatewaytest.ListPath, key, nil}, // a hit now
			{"HEAD", gatewaytest.ListPath, key, nil},
			{"GET", "/api4/public/topic/bitcoin/time-series/v1?bucket=day", key, []string{"Accept-Encoding", "gzip"}},
			{"GET", "/api4/public/topic/bitcoin/time-series/v1?bucket=day", key, []string{"Accept-Encoding", "gzip"}},
			{"HEAD", "/api4/public/topic/bitcoin/time-series/v1?bucket=day", key, []string{"Accept-Encoding", "gzip"}},
			{"GET", "/api4/public/topic/bitcoin/time-series/v1?bucket=day", key, nil}, // the same hit, not encoded
			{"GET", gatewaytest.ListPath, key, []string{"If-None-Match", "*"}},
			{"GET", gatewaytest.ListPath, limitedKey, nil},
			{"GET", gatewaytest.ListPath, limitedKey, []string{"Accept-Encoding", "gzip"}},
			{"GET", tsv, key, nil},
			{"GET", tsv, key, nil},
			{"GET", gatewaytest.ListPath, "tg_wrong", nil},
			{"POST", gatewaytest.ListPath, key, []string{"Content-Type", "application/json"}},
			{"GET", "/api4/public/topic/Not%2FA%2FTopic/whatsup/v1", key, nil},
			{"GET", gatewaytest.ListPath, key, nil}, // after the hand-off, on a new connection
		}
	}
	// Volatile fields differ between any two responses.
	volatile := []string{"Date", "X-Request-Id", "Age"}
	fingerprint := func(t *testing.T, s *gatewaytest.Served, st step) (string, *http.Response) {
		t.Helper()
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			TLSClientConfig:    &tls.Config{RootCAs: pool, ServerName: "tg.test", NextProtos: []string{"http/1.1"}},
			DisableCompression: true,
		}}
		defer c.CloseIdleConnections()
		var body io.Reader
		if st.method == http.MethodPost {
			body = strings.NewReader(`{}`)
		}
		req, err := http.NewRequest(st.method, "https://"+s.Public+st.path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+st.key)
		for i := 0; i+1 < len(st.header); i += 2 {
			req.Header.Set(st.header[i], st.header[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", st.method, st.path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for k := range resp.Header {
			if !slices.Contains(volatile, k) {
				names = append(names, k)
			}
		}
		slices.Sort(names)
		var out strings.Builder
		fmt.Fprintf(&out, "%s %d\n", resp.Proto, resp.StatusCode)
		for _, k := range names {
			fmt.Fprintf(&out, "%s: %q\n", k, resp.Header[k])
		}
		fmt.Fprintf(&out, "\n%q", redactRequestID(b))
		return out.String(), resp
	}
	for i, st := range steps(lane.Key) {
		got, resp := fingerprint(t, lane, st)
		stdStep := st
		if st.key == lane.Key {
			stdStep.key = std.Key
		}
		want, _ := fingerprint(t, std, stdStep)
		if got != want {
			t.Errorf("step %d %s %s: the lane answered\n%s\nnet/http answered\n%s", i, st.method, st.path, got, want)
		}
		if resp.TLS == nil || resp.TLS.NegotiatedProtocol != "http/1.1" {
			t.Errorf("step %d: TLS state %+v; want http/1.1 negotiated", i, resp.TLS)
		}
		if resp.Header.Get("Strict-Transport-Security") != "max-age=86400" {
			t.Errorf("step %d: no HSTS on the lane's answer", i)
		}
	}

	t.Run("h2 clients get HTTP/2", func(t *testing.T) {
		c := gatewaytest.HttpsClient(pool, "tg.test", tls.VersionTLS12, 0)
		defer c.CloseIdleConnections()
		resp, body, err := gatewaytest.GetWithKey(t, c, "https://"+lane.Public+gatewaytest.ListPath, lane.Key)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("got %s %d; want HTTP/2 200", resp.Proto, resp.StatusCode)
		}
		gatewaytest.CheckList(t, body)
	})

	t.Run("plain HTTP to the TLS port is refused as net/http refuses it", func(t *testing.T) {
		for _, s := range []*gatewaytest.Served{lane, std} {
			conn, err := net.DialTimeout("tcp", s.Public, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: tg.test\r\n\r\n", gatewaytest.ListPath)
			line, _ := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if !strings.HasPrefix(line, "HTTP/1.0 400") {
				t.Errorf("first line %q; want HTTP/1.0 400", line)
			}
		}
	})
}

// redactRequestID blanks the request id inside a JSON error body, the one
// part of an error body that differs between two gateways.
func redactRequestID(b []byte) string {
	s := string(b)
	i := strings.Index(s, `"request_id":"`)
	if i < 0 {
		return s
	}
	j := strings.IndexByte(s[i+len(`"request_id":"`):], '"')
	if j < 0 {
		return s
	}
	return s[:i] + `"request_id":"-"` + s[i+len(`"request_id":"`)+j:]
}

// TestTLSSessionResumption: a client that kept the session ticket of its
// first connection resumes the session on the next, over TLS 1.2 and 1.3,
// on the lane and with net/http alike.
func TestTLSSessionResumption(t *testing.T) {
	on, off := true, false
	gws, pool := gatewaytest.HttpsGateways(t, func(c *config.Config) { c.Server.FastHTTP1 = &on }, func(c *config.Config) { c.Server.FastHTTP1 = &off })
	for i, s := range gws {
		t.Run(fmt.Sprintf("fast_http1=%v", i == 0), func(t *testing.T) { resumesAcross(t, []*gatewaytest.Served{s, s}, pool) })
	}
}

// TestTLSSessionResumptionAcrossInstances: two gateways in cluster mode
// share their session ticket keys through Redis, so a client that did its
// full handshake with one resumes on the other, as it would behind one
// address: over HTTP/1.1 and HTTP/2, TLS 1.2 and 1.3, on the lanes and on
// net/http alone (server.fast_http1 and fast_http2 off).
func TestTLSSessionResumptionAcrossInstances(t *testing.T) {
	_, prefix := testRedis(t)
	off := false
	for name, lanes := range map[string]func(*config.Config){
		"lanes":    func(*config.Config) {},
		"net/http": func(c *config.Config) { c.Server.FastHTTP1, c.Server.FastHTTP2 = &off, &off },
	} {
		t.Run(name, func(t *testing.T) {
			cluster := func(c *config.Config) {
				c.Redis.URL, c.Redis.Prefix = "redis://"+redistest.Addr+"/0", prefix
				lanes(c)
			}
			gws, pool := gatewaytest.HttpsGateways(t, cluster, cluster)
			resumesAcross(t, gws, pool)
		})
	}
}

// resumesAcross connects a client to gws[0] and then to gws[1] (one
// gateway twice, or two behind one name), each time on a new connection
// that offers the session ticket the client kept, over HTTP/1.1 and
// HTTP/2, TLS 1.2 and 1.3. It requires a full handshake first and a
// resumed session second.
func resumesAcross(t *testing.T, gws []*gatewaytest.Served, pool *x509.CertPool) {
	t.Helper()
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, proto := range []string{"http/1.1", "h2"} {
			c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "tg.test", MinVersion: v, MaxVersion: v,
					NextProtos: []string{proto}, ClientSessionCache: tls.NewLRUClientSessionCache(4)},
				ForceAttemptHTTP2: proto == "h2",
				DisableKeepAlives: true, // every request a new connection
			}}
			var resumed []bool
			for _, s := range gws {
				resp, _, err := gatewaytest.GetWithKey(t, c, "https://"+s.Public+gatewaytest.ListPath, s.Key)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusOK || (proto == "h2") != (resp.ProtoMajor == 2) {
					t.Fatalf("TLS %x, %s: status %d over %s", v, proto, resp.StatusCode, resp.Proto)
				}
				resumed = append(resumed, resp.TLS.DidResume)
			}
			c.CloseIdleConnections()
			if resumed[0] || !resumed[1] {
				t.Errorf("TLS %x, %s: resumed %v; want a full handshake, then the second connection resuming the first's session", v, proto, resumed)
			}
		}
	}
}
