package api

import (
	"bufio"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"trendgate/internal/httperr"
)

func testRoutes(t testing.TB) *Routes {
	t.Helper()
	one := func(n int64) *int64 { return &n }
	rs, err := NewRoutes([]RouteConfig{
		{Name: "coin", Path: "/api4/public/coins/{coin}/v1", Params: map[string]string{"coin": "slug"}, Cost: 1, Fresh: time.Minute},
		{Name: "coins_list", Path: "/api4/public/coins/list/v1", Cost: 1, Fresh: time.Minute, Query: []QueryParam{
			{Name: "sort", Type: QueryEnum, Values: []string{"alt_rank", "galaxy_score"}},
			{Name: "limit", Type: QueryInteger, Min: one(1), Max: one(100)},
			{Name: "desc", Type: QueryBool},
			{Name: "filter", Type: QueryString},
		}},
		{Name: "topic_posts", Path: "/api4/public/topic/{topic}/posts/v1", Params: map[string]string{"topic": "topic"}, Cost: 2, Fresh: time.Minute},
		{Name: "post", Path: "/api4/public/posts/{network}/{id}/v1", Params: map[string]string{"network": "slug", "id": "id"}, Cost: 1, Fresh: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestRoutesParse(t *testing.T) {
	rs := testRoutes(t)
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		target string
		key    string // want; "" when code is set
		code   string
	}{
		{target: "/api4/public/coins/list/v1", key: "v2|route|coins_list|/api4/public/coins/list/v1|"},
		{target: "/api4/public/coins/list/v1?sort=galaxy_score&limit=10", key: "v2|route|coins_list|/api4/public/coins/list/v1|limit=10&sort=galaxy_score"},
		{target: "/api4/public/coins/list/v1?limit=10&sort=galaxy_score", key: "v2|route|coins_list|/api4/public/coins/list/v1|limit=10&sort=galaxy_score"},
		{target: "/api4/public/coins/list/v1?filter=layer+1%2Cdefi", key: "v2|route|coins_list|/api4/public/coins/list/v1|filter=layer+1%2Cdefi"},
		{target: "/api4/public/coins/BTC/v1", key: "v2|route|coin|/api4/public/coins/BTC/v1|"},
		{target: "/api4/public/topic/%23AI/posts/v1", key: "v2|route|topic_posts|/api4/public/topic/%23ai/posts/v1|"},
		{target: "/api4/public/topic/ai+agents/posts/v1", key: "v2|route|topic_posts|/api4/public/topic/ai%20agents/posts/v1|"},
		{target: "/api4/public/posts/twitter/1234567/v1", key: "v2|route|post|/api4/public/posts/twitter/1234567/v1|"},
		{target: "/api4/public/topic/bitcoin/whatsup/v1", key: "v2|whatsup|bitcoin"}, // the built-in still wins
		{target: "/api4/public/posts/twitter/12a/v1", code: "invalid_parameter"},
		{target: "/api4/public/coins/B%54C/v1", code: "invalid_parameter"},
		{target: "/api4/public/topic/a%2Fb/posts/v1", code: "invalid_topic"},
		{target: "/api4/public/coins/list/v1?limit=0", code: "invalid_parameter"},
		{target: "/api4/public/coins/list/v1?limit=007", code: "invalid_parameter"},
		{target: "/api4/public/coins/list/v1?limit=", code: "invalid_parameter"},
		{target: "/api4/public/coins/list/v1?desc=1", code: "invalid_parameter"},
		{target: "/api4/public/coins/list/v1?sort=price", code: "invalid_parameter"},
		{target: "/api4/public/coins/list/v1?filter=%3Cscript%3E", code: "invalid_parameter"},
		{target: "/api4/public/coins/list/v1?page=2", code: "unknown_parameter"},
		{target: "/api4/public/coins/list/v1?limit=1&limit=2", code: "duplicate_parameter"},
		{target: "/api4/public/coins/list/v1?api_key=x", code: "key_in_query"},
		{target: "/api4/public/coins/list/v1?a;b", code: "invalid_query"},
		{target: "/api4/public/coins/list/v2", code: "not_found"},
		{target: "/api4/public/coins//v1", code: "invalid_parameter"},
		{target: "/api4/public/nft/list/v1", code: "not_found"},
		{target: "/public/coins/list/v1", code: "not_found"},
	} {
		r := httptest.NewRequest(http.MethodGet, tc.target, nil)
		q, err := rs.Parse(r, now)
		if tc.code != "" {
			var he *httperr.Error
			if !errors.As(err, &he) || he.Code != tc.code {
				t.Errorf("Parse(%s) = %q, %v; want error %s", tc.target, q.Key(), err, tc.code)
			}
			continue
		}
		if err != nil || q.Key() != tc.key {
			t.Errorf("Parse(%s) = %q, %v; want %q", tc.target, q.Key(), err, tc.key)
		}
		if q.Route != nil && (q.UpstreamPath() != q.Path || q.UpstreamQuery() != q.Query) {
			t.Errorf("Parse(%s): upstream %s?%s; want the canonical path and query", tc.target, q.UpstreamPath(), q.UpstreamQuery())
		}
	}

	r := httptest.NewRequest(http.MethodPost, "/api4/public/coins/list/v1", nil)
	if _, err := rs.Parse(r, now); err != ErrMethodNotAllowed {
		t.Errorf("POST: %v; want ErrMethodNotAllowed", err)
	}
	var none *Routes
	if _, err := none.Parse(httptest.NewRequest(http.MethodGet, "/api4/public/coins/list/v1", nil), now); err != ErrNotFound {
		t.Errorf("nil Routes: %v; want ErrNotFound", err)
	}
}

func TestValidateRoutes(t *testing.T) {
	ok := RouteConfig{Name: "a", Path: "/api4/public/a/v1", Cost: 1, Fresh: time.Minute}
	no, yes := false, true
	for _, tc := range []struct {
		name  string
		route RouteConfig
		want  string
	}{
		{"outside /api4/", RouteConfig{Name: "a", Path: "/topic/x", Cost: 1, Fresh: time.Minute}, "[1].path: \"/topic/x\" must start with /api4/"},
		{"partial parameter", RouteConfig{Name: "b", Path: "/api4/x{id}/v1", Cost: 1, Fresh: time.Minute}, "a parameter must be a whole segment"},
		{"missing rule", RouteConfig{Name: "b", Path: "/api4/x/{id}", Cost: 1, Fresh: time.Minute}, "[1].params: no rule for path parameter {id}"},
		{"rule without parameter", RouteConfig{Name: "b", Path: "/api4/x", Params: map[string]string{"id": "id"}, Cost: 1, Fresh: time.Minute}, "[1].params.id: the path has no parameter {id}"},
		{"duplicate name", RouteConfig{Name: "a", Path: "/api4/b", Cost: 1, Fresh: time.Minute}, `[1].name: "a" is already used by routes[0]`},
		{"route name", RouteConfig{Name: "route", Path: "/api4/b", Cost: 1, Fresh: time.Minute}, `[1].name: "route" is a built-in endpoint`},
		{"topics list", RouteConfig{Name: "b", Path: "/api4/public/topics/list/v1", Cost: 1, Fresh: time.Minute}, "shadows the built-in endpoint list"},
		{"a topic segment", RouteConfig{Name: "b", Path: "/api4/public/topic/{x}/whatsup/v1", Params: map[string]string{"x": "slug"}, Cost: 1, Fresh: time.Minute}, "shadows the built-in endpoint whatsup"},
		{"same shape", RouteConfig{Name: "b", Path: "/api4/public/a/v1", Cost: 1, Fresh: time.Minute}, "[1].path: shadows routes[0] (a)"},
		{"negative stale", RouteConfig{Name: "b", Path: "/api4/b", Cost: 1, Fresh: time.Minute, Stale: -time.Second}, "[1].stale: must not be negative"},
		{"enum without values", RouteConfig{Name: "b", Path: "/api4/b", Cost: 1, Fresh: time.Minute, Query: []QueryParam{{Name: "s", Type: QueryEnum}}}, "[1].query[0]: an enum needs values"},
		{"unknown type", RouteConfig{Name: "b", Path: "/api4/b", Cost: 1, Fresh: time.Minute, Query: []QueryParam{{Name: "s", Type: "float"}}}, `unknown type "float"`},
		{"PUT", RouteConfig{Name: "b", Path: "/api4/b", Methods: []string{"PUT"}, Cost: 1, Fresh: time.Minute}, `[1].methods[0]: "PUT" is not allowed`},
		{"no fresh", RouteConfig{Name: "b", Path: "/api4/b", Cost: 1}, "[1].fresh: must be a duration above 0, such as 60s (or cache: false"},
		{"pass-through with fresh", RouteConfig{Name: "b", Path: "/api4/b", Cost: 1, Fresh: time.Minute, Cache: &no}, "[1].fresh: must be left out with cache: false"},
		{"pass-through with stale", RouteConfig{Name: "b", Path: "/api4/b", Cost: 1, Stale: time.Minute, Cache: &no}, "[1].stale: must be left out with cache: false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateRoutes([]RouteConfig{ok, tc.route})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ValidateRoutes = %v; want a problem containing %q", err, tc.want)
			}
		})
	}
	// A literal beside a parameter is more specific, not a shadow: the
	// slug rule accepts "list", but the literal route is tried first.
	if err := ValidateRoutes([]RouteConfig{
		{Name: "coin", Path: "/api4/public/coins/{coin}/v1", Params: map[string]string{"coin": "slug"}, Cost: 1, Fresh: time.Minute},
		{Name: "coins_list", Path: "/api4/public/coins/list/v1", Cost: 1, Fresh: time.Minute},
		{Name: "by_id", Path: "/api4/public/topic/{id}/whatsup/v1", Params: map[string]string{"id": "id"}, Cost: 1, Fresh: time.Minute},
	}); err == nil || !strings.Contains(err.Error(), "[2].path: shadows the built-in endpoint whatsup") || strings.Contains(err.Error(), "[0]") || strings.Contains(err.Error(), "[1]") {
		t.Errorf("ValidateRoutes = %v; want only routes[2] refused (an id topic can be all digits)", err)
	}
	// A pass-through route needs no lifetimes; cache: true is the default.
	if err := ValidateRoutes([]RouteConfig{
		{Name: "delete_search", Path: "/api4/public/searches/{slug}/delete", Params: map[string]string{"slug": "slug"}, Cost: 1, Cache: &no},
		{Name: "b", Path: "/api4/b", Cost: 1, Fresh: time.Minute, Cache: &yes},
	}); err != nil {
		t.Errorf("ValidateRoutes = %v; want a pass-through route without fresh accepted", err)
	}
}

func TestQueryParamYAML(t *testing.T) {
	var got []QueryParam
	if err := yaml.Unmarshal([]byte("[sort, {name: limit, type: integer, max: 5}]"), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "sort" || got[0].Type != QueryString || got[1].Type != QueryInteger || *got[1].Max != 5 {
		t.Errorf("got %+v", got)
	}
	if err := yaml.Unmarshal([]byte("[{name: limit, maximum: 5}]"), &got); err == nil || !strings.Contains(err.Error(), "maximum") {
		t.Errorf("unknown field: %v; want an error naming it", err)
	}
}

// FuzzRoutes checks that no request-target makes the routes' parser
// panic, and that every request it accepts has a key that names its route
// and a path under /api4/ without raw bytes a URL would re-escape.
func FuzzRoutes(f *testing.F) {
	for _, seed := range []string{
		"/api4/public/coins/list/v1?sort=alt_rank&limit=5", // canonical
		"/api4/public/topic/%23ai/posts/v1",                // an encoded topic
		"/api4/public/posts/reddit/123/v1",                 // two parameters
		"/api4/public/coins/list/v1?filter=a%7Cb",          // a '|' in a value
		"/api4/public/topic/%25/posts/v1",                  // an encoded '%'
	} {
		f.Add(seed)
	}
	rs := testRoutes(f)
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, target string) {
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n#") {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")))
		if err != nil {
			return
		}
		q, err := rs.Parse(r, now)
		if err != nil || q.Route == nil {
			return
		}
		key := q.Key()
		if strings.Count(key, "|") != 4 || !strings.HasPrefix(key, keyVersion+"route|"+q.Route.Name+"|") {
			t.Fatalf("%s: key %q", target, key)
		}
		if !strings.HasPrefix(q.Path, "/api4/") || strings.ContainsAny(q.Path+q.Query, " #?|") {
			t.Fatalf("%s: upstream %s?%s", target, q.Path, q.Query)
		}
	})
}

func TestRoutesParseKey(t *testing.T) {
	rs := testRoutes(t)
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	for _, key := range []string{
		"v2|route|coins_list|/api4/public/coins/list/v1|limit=10&sort=galaxy_score",
		"v2|route|topic_posts|/api4/public/topic/%23ai/posts/v1|",
		"v2|whatsup|bitcoin",
	} {
		if q, err := rs.ParseKey(key, now); err != nil || q.Key() != key {
			t.Errorf("ParseKey(%q) = %q, %v; want the key back", key, q.Key(), err)
		}
	}
	for _, key := range []string{
		"v2|route|coins_list|/api4/public/coins/list/v1|sort=galaxy_score&limit=10", // not sorted
		"v2|route|gone|/api4/public/coins/list/v1|",                                 // no such route
		"v2|route|coin|/api4/public/coins/list/v1|",                                 // another route's path
		"v2|route|topic_posts|/api4/public/topic/%23AI/posts/v1|",                   // not canonical
		"v2|route|coins_list|/api4/public/coins/list/v1",                            // a field short
	} {
		if _, err := rs.ParseKey(key, now); !errors.Is(err, ErrNotCanonicalKey) {
			t.Errorf("ParseKey(%q) = %v; want ErrNotCanonicalKey", key, err)
		}
	}
}
