package proxy_test

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"trendgate/gateway/gatewaytest"
)

// TestRoutesPublicGoClient drives the example routes with the exact
// requests the public Go client for this API sends, so a team that points
// that client's base URL at trendgate gets its answers.
//
// The paths and query encoding come from github.com/tigusigalpa/lunarcrush-go
// (read at commit 1bf88a6b, "Unreleased" after v1.0.0): its base URL ends
// in /api4; CoinsService.List sends GET /public/coins/list/v1 with the
// query of CoinsListParams (sort, desc via strconv.FormatBool, limit,
// page, filter; unset ones omitted) encoded by url.Values.Encode, so
// sorted by name; TopicsService.Posts sends GET
// /public/topic/<url.PathEscape(topic)>/posts/v1 without a query; and
// CreatorsService.List sends GET /public/creators/list/v1. It sends
// Authorization: Bearer <key> and Accept: application/json.
func TestRoutesPublicGoClient(t *testing.T) {
	h := gatewaytest.New(t, gatewaytest.WithRoutes)
	base := "/api4" // the client's base URL path

	// clientGet builds the request as the client does: base + path, and
	// the query (when any) through url.Values.Encode.
	clientGet := func(path string, q url.Values) (*http.Response, []byte) {
		target := base + path
		if len(q) > 0 {
			target += "?" + q.Encode()
		}
		return h.Get(target, h.Full, "Accept", "application/json")
	}
	coinsQuery := func(sort string, desc bool, limit, page int, filter string) url.Values {
		q := url.Values{}
		q.Set("sort", sort)
		q.Set("desc", strconv.FormatBool(desc))
		q.Set("limit", strconv.Itoa(limit))
		q.Set("page", strconv.Itoa(page))
		if filter != "" {
			q.Set("filter", filter)
		}
		return q
	}

	for _, tc := range []struct {
		name  string
		path  string
		query url.Values
	}{
		{"Coins.List without params", "/public/coins/list/v1", nil},
		{"Coins.List with every param", "/public/coins/list/v1", coinsQuery("galaxy_score", true, 10, 0, "defi")},
		{"Coins.List limit only", "/public/coins/list/v1", url.Values{"limit": {"25"}}},
		{"Topics.Posts", "/public/topic/" + url.PathEscape("bitcoin") + "/posts/v1", nil},
		{"Topics.Posts of #ai", "/public/topic/" + url.PathEscape("#ai") + "/posts/v1", nil},
		{"Topics.Posts of a topic with a space", "/public/topic/" + url.PathEscape("ai agents") + "/posts/v1", nil},
		{"Creators.List", "/public/creators/list/v1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := clientGet(tc.path, tc.query)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s?%s: status %d, body %s", tc.path, tc.query.Encode(), resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
				t.Errorf("Content-Type %q; want JSON", ct)
			}
			// Sent again, the same call is answered from the cache.
			resp, _ = clientGet(tc.path, tc.query)
			if got := resp.Header.Get("Cache-Status"); got != "trendgate; hit" {
				t.Errorf("second call: Cache-Status %q; want a hit", got)
			}
		})
	}
	if n := h.Up.Count(); n != 7 {
		t.Errorf("upstream calls = %d; want 7, one per distinct call", n)
	}
}
