package api

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"trendgate/internal/httperr"
)

// canonicalTopic is the topic rule of docs/api.md ("Endpoints and
// parsing"), written independently of decodeTopic so the fuzzer checks one
// against the other.
var canonicalTopic = regexp.MustCompile(`^[a-z0-9#$]([a-z0-9 #$]*[a-z0-9#$])?$`)

// fuzzEpoch and fuzzSpan keep the fuzzed clock between 2009 and 2109, where
// every accepted window's forwarded end still has at most 10 digits.
const (
	fuzzEpoch = 1230768000 // 2009-01-01 UTC
	fuzzSpan  = 100 * 365 * daySeconds
)

// FuzzCanonical feeds ParseRequest arbitrary request-targets. It must never
// panic; every error must be a client error with a code; and every accepted
// request must survive a round trip through its own upstream target: parsing
// UpstreamPath()+"?"+UpstreamQuery() gives the same Request and Key, which
// shows the topic is re-encoded exactly once and the forwarded window selects
// the same buckets. Its key must parse back to it with ParseKey.
func FuzzCanonical(f *testing.F) {
	const now = 1760654918 // 2025-10-16 22:48:38 UTC, as in the unit tests
	seeds := []struct {
		path, query string
		now         int64
	}{
		// The four routes in their plainest form.
		{"/api4/public/topics/list/v1", "", now},
		{"/api4/public/topic/bitcoin/whatsup/v1", "", now},
		{"/api4/public/topic/bitcoin/time-series/v1", "", now},
		{"/topic/bitcoin/time-series/interactions.tsv", "", now},
		// Topic spellings: escapes, '+', upper case, cashtags, hashtags.
		{"/api4/public/topic/%23ai/time-series/v1", "bucket=day&interval=1m", now},
		{"/api4/public/topic/ai+agents/whatsup/v1", "", now},
		{"/api4/public/topic/AI%20Agents/whatsup/v1", "", now},
		{"/api4/public/topic/$capitalism/time-series/v1", "bucket=days", now},
		{"/topic/%24btc/time-series/sentiment.tsv", "", now},
		// Topics that must be refused: encoded slash, plus, percent, double
		// encoding, double space, non-ASCII, too long.
		{"/api4/public/topic/a%2Fb/whatsup/v1", "", now},
		{"/api4/public/topic/c%2B%2B/whatsup/v1", "", now},
		{"/api4/public/topic/%2523ai/whatsup/v1", "", now},
		{"/api4/public/topic/a++b/whatsup/v1", "", now},
		{"/api4/public/topic/caf%C3%A9/whatsup/v1", "", now},
		{"/api4/public/topic/" + strings.Repeat("x", 65) + "/whatsup/v1", "", now},
		// Path shapes: trailing slash, '//', dot segments, raw '#'.
		{"/api4/public/topics/list/v1/", "", now},
		{"/api4/public/topic//whatsup/v1", "", now},
		{"/api4/public/topic/../whatsup/v1", "", now},
		{"/api4/public/topic/#ai/whatsup/v1", "", now},
		// Windows: aligned, unaligned, only start, only end, one bucket,
		// interval alongside, daily, at the edge of the current bucket.
		{"/api4/public/topic/bitcoin/time-series/v1", "start=1759968000&end=1760652000", now},
		{"/api4/public/topic/bitcoin/time-series/v1", "start=1759964401&end=1760655599&interval=3m", now},
		{"/api4/public/topic/bitcoin/time-series/v1", "start=1760600000", now},
		{"/api4/public/topic/bitcoin/time-series/v1", "end=1760641234", now},
		{"/api4/public/topic/bitcoin/time-series/v1", "start=1760652000&end=1760654918", now},
		{"/api4/public/topic/bitcoin/time-series/v1", "bucket=day&start=1759968000&end=1760659199", now},
		// Query problems: semicolons, duplicates, keys, numbers.
		{"/api4/public/topic/bitcoin/time-series/v1", "bucket=hour;interval=1w", now},
		{"/api4/public/topic/bitcoin/time-series/v1", "bucket=hour&bucket=day", now},
		{"/api4/public/topic/bitcoin/time-series/v1", "key=tg_secret", now},
		{"/api4/public/topic/bitcoin/time-series/v1", "start=01759968000&end=1e9", now},
		{"/api4/public/topic/bitcoin/time-series/v1", "start=1760652000&end=1759968000", now},
		// Clocks far from today: near the epoch and near the 10-digit limit.
		{"/api4/public/topic/bitcoin/time-series/v1", "start=1", 0},
		{"/api4/public/topic/bitcoin/time-series/v1", "end=9999999999", -1},
	}
	for _, s := range seeds {
		f.Add(s.path, s.query, s.now)
	}
	f.Fuzz(func(t *testing.T, path, rawQuery string, nowUnix int64) {
		now := time.Unix(fuzzEpoch+mod(nowUnix, fuzzSpan), 0)
		if fast, ok := scanQueryFast(rawQuery); ok {
			slow, ok := scanQuerySlow(rawQuery)
			if !ok || fast != slow {
				t.Fatalf("query %q: fast scan %+v; url.ParseQuery gives %+v (ok %v)", rawQuery, fast, slow, ok)
			}
		}
		r := fuzzRequest(path, rawQuery)
		if r == nil {
			return // not a request-target net/http would hand to a handler
		}
		q, err := ParseRequest(r, now)
		if err != nil {
			var he *httperr.Error
			if !errors.As(err, &he) {
				t.Fatalf("error %v (%T) is not an *httperr.Error", err, err)
			}
			switch he.Status {
			case http.StatusBadRequest, http.StatusNotFound:
			default:
				t.Fatalf("got status %d for a GET; want 400 or 404", he.Status)
			}
			if he.Code == "" || he.Message == "" {
				t.Fatalf("got code %q message %q; want both set", he.Code, he.Message)
			}
			if q != (Request{}) {
				t.Fatalf("got %+v with an error; want the zero Request", q)
			}
			return
		}
		checkCanonical(t, q)
		checkTopicOracle(t, r.URL.EscapedPath(), q)

		up := q.UpstreamPath()
		if uq := q.UpstreamQuery(); uq != "" {
			up += "?" + uq
		}
		r2 := fuzzRequest(up, "")
		if r2 == nil {
			t.Fatalf("upstream target %q is not a valid request-target", up)
		}
		again, err := ParseRequest(r2, now)
		if err != nil {
			t.Fatalf("upstream target %q of %+v: %v; want it accepted", up, q, err)
		}
		canon := q
		canon.clientStart = 0 // neither sent upstream nor in the key
		if again != canon || again.Key() != q.Key() {
			t.Fatalf("upstream target %q parses to %+v (key %q); want %+v (key %q)", up, again, again.Key(), canon, q.Key())
		}
		if fromKey, err := ParseKey(q.Key(), now); err != nil || fromKey != canon {
			t.Fatalf("ParseKey(%q): got %+v, %v; want %+v", q.Key(), fromKey, err, canon)
		}
		if q.clientStart != 0 && (q.End != 0 || StartBound(q.clientStart, q.BucketSeconds()) != q.Start) {
			t.Fatalf("%+v: the client's start %d is not of a start-only window with that canonical start", q, q.clientStart)
		}
	})
}

// fuzzRequest builds the request net/http's server would build for the
// target path?rawQuery, or nil if the server would refuse the target.
func fuzzRequest(path, rawQuery string) *http.Request {
	target := path
	if rawQuery != "" {
		target += "?" + rawQuery
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil
	}
	return &http.Request{Method: http.MethodGet, URL: u, RequestURI: target, Header: http.Header{}}
}

// checkCanonical checks the invariants every accepted Request holds.
func checkCanonical(t *testing.T, q Request) {
	t.Helper()
	if !strings.HasPrefix(q.Key(), "v2|") {
		t.Fatalf("Key() = %q; want a v1 key", q.Key())
	}
	if q.Endpoint == EndpointList {
		if q != (Request{Endpoint: EndpointList}) {
			t.Fatalf("list request %+v carries fields; want none", q)
		}
		return
	}
	if len(q.Topic) > maxTopicLen || !canonicalTopic.MatchString(q.Topic) || strings.Contains(q.Topic, "  ") {
		t.Fatalf("topic %q is not canonical", q.Topic)
	}
	switch q.Endpoint {
	case EndpointWhatsup:
		if q != (Request{Endpoint: EndpointWhatsup, Topic: q.Topic}) {
			t.Fatalf("whatsup request %+v carries extra fields", q)
		}
	case EndpointTSV:
		switch q.Metric {
		case "interactions", "posts_active", "contributors_active", "sentiment":
		default:
			t.Fatalf("metric %q is not a TSV metric", q.Metric)
		}
	case EndpointSeries:
		size := bucketSeconds(q.Bucket)
		if size == 0 {
			t.Fatalf("bucket %q is not hour or day", q.Bucket)
		}
		if q.Interval != "" {
			if q.Start != 0 || q.End != 0 {
				t.Fatalf("%+v has both an interval and a window", q)
			}
			return
		}
		if q.Start <= 0 || q.End != 0 && (q.Start >= q.End || q.Start != StartBound(q.Start, size)) || q.End != EndBound(q.End, size) {
			t.Fatalf("window %d..%d is not canonical for %d-second buckets", q.Start, q.End, size)
		}
	default:
		t.Fatalf("endpoint %v is not one of the four", q.Endpoint)
	}
}

// checkTopicOracle decodes the topic segment of an accepted request a
// second way, with net/url ('+' turned into %20 first, then PathUnescape and
// lower-casing), and requires the same topic: decoding happened exactly once.
func checkTopicOracle(t *testing.T, escapedPath string, q Request) {
	t.Helper()
	var rest string
	switch q.Endpoint {
	case EndpointWhatsup, EndpointSeries:
		rest = strings.TrimPrefix(escapedPath, apiTopicPrefix)
	case EndpointTSV:
		rest = strings.TrimPrefix(escapedPath, tsvPrefix)
	default:
		return
	}
	seg, _, _ := strings.Cut(rest, "/")
	want, err := url.PathUnescape(strings.ReplaceAll(seg, "+", "%20"))
	if err != nil {
		t.Fatalf("segment %q was accepted but net/url cannot unescape it: %v", seg, err)
	}
	if want = strings.ToLower(want); q.Topic != want {
		t.Fatalf("segment %q decodes to topic %q; net/url says %q", seg, q.Topic, want)
	}
}

// mod is the non-negative remainder of a divided by m.
func mod(a, m int64) int64 {
	r := a % m
	if r < 0 {
		r += m
	}
	return r
}
