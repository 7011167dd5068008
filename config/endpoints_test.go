package config

import (
	"reflect"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/limits"
)

// TestEndpointTable walks api.Endpoints and checks that every table kept
// per endpoint outside package api has the endpoint: its cost
// (limits.Costs), its freshness (cache.Config.FreshUntil), its documented
// fields (KnownFields) and allowlist (Fields.For), and its label in
// metrics and logs. Each per-endpoint struct gets a distinct value per
// field, so an endpoint missing from a switch (priced at the default 1,
// never fresh, no fields) or two endpoints sharing a field fails here.
func TestEndpointTable(t *testing.T) {
	var costs limits.Costs
	fillDistinct(reflect.ValueOf(&costs).Elem(), func(i int) reflect.Value { return reflect.ValueOf(i + 2) })
	var fields Fields
	fillDistinct(reflect.ValueOf(&fields).Elem(), func(i int) reflect.Value { return reflect.ValueOf([]string{string(rune('a' + i))}) })
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	ttl := cache.DefaultConfig()

	seenCost, seenField, seenLabel := map[int]api.Endpoint{}, map[string]api.Endpoint{}, map[string]api.Endpoint{}
	for _, ep := range api.Endpoints {
		t.Run(ep.String(), func(t *testing.T) {
			if c := costs.For(ep); c < 2 {
				t.Errorf("limits.Costs.For(%s) = %d: no cost field for it", ep, c)
			} else if other, dup := seenCost[c]; dup {
				t.Errorf("limits.Costs.For(%s) uses %s's field", ep, other)
			} else {
				seenCost[c] = ep
			}
			if f := fields.For(ep); len(f) != 1 {
				t.Errorf("Fields.For(%s) = %q: no allowlist field for it", ep, f)
			} else if other, dup := seenField[f[0]]; dup {
				t.Errorf("Fields.For(%s) uses %s's field", ep, other)
			} else {
				seenField[f[0]] = ep
			}
			if len(KnownFields[ep]) == 0 {
				t.Errorf("KnownFields has no fields for %s", ep)
			}
			if until := ttl.FreshUntil(cache.Class{Endpoint: ep, Bucket: "hour"}, now); !until.After(now) {
				t.Errorf("cache FreshUntil(%s) = now: no lifetime for it", ep)
			}
			label := api.Request{Endpoint: ep}.Label()
			if label == "unknown" || label == "" {
				t.Errorf("label of %s = %q", ep, label)
			} else if other, dup := seenLabel[label]; dup {
				t.Errorf("label %q of %s is %s's too", label, ep, other)
			} else {
				seenLabel[label] = ep
			}
			if spec := ep.Spec(); spec.Name != ep.String() || spec.Path == "" {
				t.Errorf("Spec(%s) = %+v; want its name and path", ep, spec)
			}
		})
	}
	if n := reflect.TypeOf(costs).NumField(); len(seenCost) != n {
		t.Errorf("%d of limits.Costs' %d fields are used by an endpoint", len(seenCost), n)
	}
	if n := reflect.TypeOf(fields).NumField(); len(seenField) != n {
		t.Errorf("%d of Fields' %d fields are used by an endpoint", len(seenField), n)
	}
}

// fillDistinct sets field i of the struct v to value(i).
func fillDistinct(v reflect.Value, value func(i int) reflect.Value) {
	for i := range v.NumField() {
		v.Field(i).Set(value(i))
	}
}

func TestRouteWarnings(t *testing.T) {
	c := Default()
	c.Routes = ExampleRoutes()
	c.Routes[1].Stale = c.Cache.MaxStale + time.Hour
	p := c.Plans[PlanLimited]
	p.Endpoints = append(p.Endpoints, "coins_list", "topic_posts")
	c.Plans[PlanLimited] = p
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"routes[1].stale: 25h0m0s is above cache.max_stale (24h0m0s), which caps it",
		"plans.limited.endpoints[5]: route topic_posts has no limited_fields, so keys of this limited plan are refused there (403)",
	}
	got := c.routeWarnings()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("routeWarnings() = %q; want %q", got, want)
	}
}
