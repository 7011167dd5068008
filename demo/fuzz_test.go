package demo

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"trendgate/internal/clock"
)

// FuzzServeHTTP sends arbitrary request targets through the server and
// checks that every answer is well-formed: a known status, JSON bodies that
// parse, the rate-limit headers, and a series topic decoded exactly once.
func FuzzServeHTTP(f *testing.F) {
	seeds := []string{
		"/api4/public/topics/list/v1",                                        // plain list
		"/api4/public/topic/bitcoin/time-series/v1",                          // default window
		"/api4/public/topic/%23ai/time-series/v1?bucket=day&interval=all",    // encoded hashtag, long window
		"/api4/public/topic/ai%20agents/whatsup/v1",                          // encoded space
		"/api4/public/topic/%2523ai/time-series/v1",                          // double-encoded: unknown topic
		"/api4/public/topic/bitcoin/time-series/v1?start=0&end=99999999999",  // extreme window
		"/api4/public/topic/bitcoin/time-series/v1?start=1760000000&start=5", // repeated parameter
		"/api4/public/topic/x/time-series/v1?bucket=%ff",                     // bad bucket bytes
		"/topic/%24capitalism/time-series/sentiment.tsv",                     // TSV, cashtag
		"/topic/a%2Fb/time-series/interactions.tsv",                          // encoded slash
		"/api4/public/topic/%C3%A9/whatsup/v1",                               // non-ASCII topic
		"/api4/public/topic/%22%5C%00/whatsup/v1",                            // JSON-hostile bytes
		"//api4/public/topics/list/v1",                                       // double slash
	}
	for _, s := range seeds {
		f.Add(s)
	}
	srv, err := New(Options{Clock: clock.NewFake(testNow)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil || !strings.HasPrefix(target, "/") {
			t.Skip()
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL = u
		r.RequestURI = target
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		switch w.Code {
		case 200, 400, 404:
		default:
			t.Fatalf("%q: got status %d; want 200, 400 or 404", target, w.Code)
		}
		if w.Header().Get("X-Rate-Limit-Minute-Remaining") == "" || w.Header().Get("X-Lunar-Generated") == "" {
			t.Fatalf("%q: missing rate-limit or x-lunar headers", target)
		}
		if strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%q: invalid JSON body %q", target, w.Body)
		}
		ep, seg, _ := route(u.EscapedPath())
		if ep == epSeries && w.Code == 200 {
			var resp struct {
				Config struct {
					Topic string `json:"topic"`
				} `json:"config"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
			// Invalid UTF-8 is echoed as U+FFFD, as encoding/json does.
			raw, _ := url.PathUnescape(seg)
			enc, _ := json.Marshal(raw)
			var want string
			_ = json.Unmarshal(enc, &want)
			if resp.Config.Topic != want {
				t.Fatalf("%q: got topic %q; want %q", target, resp.Config.Topic, want)
			}
		}
	})
}
