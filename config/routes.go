package config

import (
	"time"

	"trendgate/api"
)

// ExampleRoutes returns the routes config.example.yaml configures, for the
// demo upstream's coins list, topic posts and creators list; demo mode
// serves them too. Each call returns a fresh value.
func ExampleRoutes() []api.RouteConfig {
	one := func(n int64) *int64 { return &n }
	return []api.RouteConfig{
		{
			Name: "coins_list",
			Path: "/api4/public/coins/list/v1",
			Query: []api.QueryParam{
				{Name: "sort", Type: api.QueryEnum, Values: []string{
					"market_cap_rank", "alt_rank", "galaxy_score", "interactions",
					"social_dominance", "volume_24h", "price"}},
				{Name: "desc", Type: api.QueryBool},
				{Name: "limit", Type: api.QueryInteger, Min: one(1), Max: one(1000)},
				{Name: "page", Type: api.QueryInteger, Min: one(0), Max: one(10000)},
				{Name: "filter", Type: api.QueryString},
			},
			Methods:       []string{"GET", "HEAD"},
			Cost:          1,
			Fresh:         10 * time.Minute,
			Stale:         time.Hour,
			LimitedFields: []string{"id", "symbol", "name", "price", "market_cap_rank"},
		},
		{
			Name:   "topic_posts",
			Path:   "/api4/public/topic/{topic}/posts/v1",
			Params: map[string]string{"topic": "topic"},
			Query: []api.QueryParam{
				{Name: "start", Type: api.QueryInteger, Min: one(1)},
				{Name: "end", Type: api.QueryInteger, Min: one(1)},
			},
			Cost:  2,
			Fresh: 5 * time.Minute,
			Stale: 30 * time.Minute,
		},
		{
			Name:          "creators_list",
			Path:          "/api4/public/creators/list/v1",
			Cost:          1,
			Fresh:         time.Hour,
			Stale:         6 * time.Hour,
			LimitedFields: []string{"creator_name", "creator_display_name", "creator_network", "creator_rank"},
		},
	}
}

// ExamplePlanRoutes maps each built-in plan to the example routes it
// lists in config.example.yaml: a limited plan only routes with an
// allowlist (limited_fields).
func ExamplePlanRoutes() map[string][]string {
	return map[string][]string{
		PlanFull:    {"coins_list", "topic_posts", "creators_list"},
		PlanLimited: {"coins_list", "creators_list"},
	}
}
