package gateway_test

import (
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// TestTLSHTTP2LaneMatchesNetHTTP sends the same HTTP/2 requests to a
// gateway whose HTTP/2 lane serves h2 (server.fast_http2, the default) and
// to one where Go's HTTP/2 server does (fast_http2: false), each over one
// connection, and requires the same status, header fields (but Date,
// X-Request-Id and Age) and bytes: misses and hits, HEAD, gzip, a 304, a
// body of known and of unknown length, another method, a bad topic, no
// key, a wrong key and an unknown route; a hit's fields written as one
// block (a limited plan's plain and gzip hits, a TSV hit, If-None-Match: *).
func TestTLSHTTP2LaneMatchesNetHTTP(t *testing.T) {
	limitedKey := gatewaytest.NewKey(t)
	fast := func(on bool) func(*config.Config) {
		return func(c *config.Config) {
			c.TLS.HSTSMaxAge = 24 * time.Hour
			c.Server.FastHTTP2 = &on
			c.Keys = append(c.Keys, config.Key{ID: "team-limited", SHA256: auth.Digest(limitedKey), Plan: "limited"})
		}
	}
	gws, pool := gatewaytest.HttpsGateways(t, fast(true), fast(false))
	lane, std := gws[0], gws[1]
	client := func() *http.Client {
		return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			TLSClientConfig:    &tls.Config{RootCAs: pool, ServerName: "tg.test", NextProtos: []string{"h2"}},
			ForceAttemptHTTP2:  true,
			DisableCompression: true,
		}}
	}
	laneClient, stdClient := client(), client()
	defer laneClient.CloseIdleConnections()
	defer stdClient.CloseIdleConnections()

	const series = "/api4/public/topic/bitcoin/time-series/v1?bucket=day"
	type step struct {
		method, path string
		key          bool   // send the gateway's key
		body         string // a request body; "-" for one of unknown length
		header       []string
		limited      bool // send the limited plan's key instead
	}
	const tsv = "/topic/bitcoin/time-series/sentiment.tsv"
	steps := []step{
		{method: "GET", path: gatewaytest.ListPath, key: true},
		{method: "GET", path: gatewaytest.ListPath, key: true}, // a hit now
		{method: "HEAD", path: gatewaytest.ListPath, key: true},
		{method: "GET", path: series, key: true, header: []string{"Accept-Encoding", "gzip"}},
		{method: "GET", path: series, key: true, header: []string{"Accept-Encoding", "gzip"}},
		{method: "HEAD", path: series, key: true, header: []string{"Accept-Encoding", "gzip"}},
		{method: "GET", path: series, key: true},
		{method: "GET", path: "/api4/public/topic/bitcoin/whatsup/v1", key: true},
		{method: "GET", path: "/topic/bitcoin/time-series/interactions.tsv", key: true},
		{method: "GET", path: gatewaytest.ListPath, key: true, header: []string{"If-None-Match", "*"}},
		{method: "GET", path: gatewaytest.ListPath, key: true, limited: true},
		{method: "GET", path: gatewaytest.ListPath, key: true, limited: true}, // a hit now
		{method: "GET", path: gatewaytest.ListPath, key: true, limited: true, header: []string{"Accept-Encoding", "gzip"}},
		{method: "GET", path: tsv, key: true},
		{method: "GET", path: tsv, key: true}, // a hit now
		{method: "GET", path: gatewaytest.ListPath, key: true, body: `{"a":1}`},
		{method: "GET", path: gatewaytest.ListPath, key: true, body: "-"},
		{method: "POST", path: gatewaytest.ListPath, key: true, body: `{}`, header: []string{"Content-Type", "application/json"}},
		{method: "GET", path: "/api4/public/topic/Not%2FA%2FTopic/whatsup/v1", key: true},
		{method: "GET", path: gatewaytest.ListPath},
		{method: "GET", path: gatewaytest.ListPath, header: []string{"Authorization", "Bearer tg_wrong"}},
		{method: "GET", path: "/nope", key: true},
		{method: "GET", path: "/api4/public/topics/list/v1?x=1", key: true},
		{method: "GET", path: gatewaytest.ListPath, key: true}, // the connection still serves
	}
	volatile := []string{"Date", "X-Request-Id", "Age"}
	fingerprint := func(t *testing.T, s *gatewaytest.Served, c *http.Client, st step, etag string) (string, *http.Response) {
		t.Helper()
		var body io.Reader
		switch st.body {
		case "":
		case "-":
			body = io.MultiReader(strings.NewReader("x")) // no length known
		default:
			body = strings.NewReader(st.body)
		}
		req, err := http.NewRequest(st.method, "https://"+s.Public+st.path, body)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case st.limited:
			req.Header.Set("Authorization", "Bearer "+limitedKey)
		case st.key:
			req.Header.Set("Authorization", "Bearer "+s.Key)
		}
		for i := 0; i+1 < len(st.header); i += 2 {
			req.Header.Set(st.header[i], st.header[i+1])
		}
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
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
		if body := redactRequestID(b); len(body) <= 300 {
			fmt.Fprintf(&out, "\n%q", body)
		} else {
			fmt.Fprintf(&out, "\n%d bytes, sha256 %x", len(body), sha256.Sum256([]byte(body)))
		}
		return out.String(), resp
	}
	for i, st := range steps {
		got, resp := fingerprint(t, lane, laneClient, st, "")
		want, _ := fingerprint(t, std, stdClient, st, "")
		if got != want {
			t.Errorf("step %d %s %s: the lane answered\n%s\nGo's HTTP/2 answered\n%s", i, st.method, st.path, got, want)
		}
		if resp.ProtoMajor != 2 {
			t.Errorf("step %d: %s; want HTTP/2", i, resp.Proto)
		}
		if resp.Header.Get("Strict-Transport-Security") != "max-age=86400" {
			t.Errorf("step %d: no HSTS on the lane's answer", i)
		}
		// A revalidation of every 200 gets the same 304 from both.
		if etag := resp.Header.Get("Etag"); etag != "" && resp.StatusCode == http.StatusOK {
			got, _ := fingerprint(t, lane, laneClient, st, etag)
			want, _ := fingerprint(t, std, stdClient, st, etag)
			if got != want {
				t.Errorf("step %d %s %s with If-None-Match: the lane answered\n%s\nGo's HTTP/2 answered\n%s", i, st.method, st.path, got, want)
			}
		}
	}
}

// TestTLSHTTP2LaneConcurrentStreams: many requests at once on one
// connection (cache hits and misses of several topics) all get their own
// whole answers from the lane.
func TestTLSHTTP2LaneConcurrentStreams(t *testing.T) {
	gws, pool := gatewaytest.HttpsGateways(t, func(c *config.Config) {
		many, manyInt, manyUnits := 1e9, 1_000_000_000, int64(1e15)
		k := &c.Keys[0]
		k.PerSecond, k.Burst, k.Daily, k.Monthly = &many, &manyInt, &manyUnits, &manyUnits
	})
	s := gws[0]
	c := gatewaytest.HttpsClient(pool, "tg.test", tls.VersionTLS12, 0)
	defer c.CloseIdleConnections()
	topics := []string{"bitcoin", "ethereum", "solana", "dogecoin"}
	want := map[string][]byte{}
	for _, topic := range topics {
		resp, body, err := gatewaytest.GetWithKey(t, c, "https://"+s.Public+"/api4/public/topic/"+topic+"/time-series/v1", s.Key)
		if err != nil || resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("%s: %v %v", topic, resp, err)
		}
		want[topic] = body
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		topic := topics[i%len(topics)]
		wg.Go(func() {
			resp, body, err := gatewaytest.GetWithKey(t, c, "https://"+s.Public+"/api4/public/topic/"+topic+"/time-series/v1", s.Key)
			switch {
			case err != nil:
				errs <- err
			case resp.StatusCode != http.StatusOK:
				errs <- fmt.Errorf("%s: status %d", topic, resp.StatusCode)
			case string(body) != string(want[topic]):
				errs <- fmt.Errorf("%s: %d bytes differ from the first answer's %d", topic, len(body), len(want[topic]))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestTLSHTTP2LaneWithoutHTTP1Lane: with fast_http1 off and fast_http2 on,
// HTTP/1.1 clients are served (by net/http, after the handshake the lane
// did) and HTTP/2 clients too, with the same bytes.
func TestTLSHTTP2LaneWithoutHTTP1Lane(t *testing.T) {
	off, on := false, true
	gws, pool := gatewaytest.HttpsGateways(t, func(c *config.Config) { c.Server.FastHTTP1, c.Server.FastHTTP2 = &off, &on })
	s := gws[0]
	var bodies []string
	for _, proto := range []string{"http/1.1", "h2"} {
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: "tg.test", NextProtos: []string{proto}},
			ForceAttemptHTTP2: proto == "h2",
		}}
		for range 2 { // a miss, then a hit on the same connection
			resp, body, err := gatewaytest.GetWithKey(t, c, "https://"+s.Public+gatewaytest.ListPath, s.Key)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || resp.TLS.NegotiatedProtocol != proto {
				t.Fatalf("%s: %s %d over %q; want 200 over %s", proto, resp.Proto, resp.StatusCode, resp.TLS.NegotiatedProtocol, proto)
			}
			bodies = append(bodies, string(body))
		}
		c.CloseIdleConnections()
	}
	for i, b := range bodies[1:] {
		if b != bodies[0] {
			t.Errorf("answer %d differs from the first", i+1)
		}
	}
}
