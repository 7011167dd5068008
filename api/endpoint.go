package api

// Endpoint names one kind of API operation: one of the four built-in
// endpoints, or EndpointRoute for every operator-configured route. It is
// the one vocabulary every package uses for them: config keys plans, costs
// and field lists by its name, the cache picks freshness by it, the
// limiter prices it and the upstream client validates bodies by it. The
// zero value names no operation; ParseRequest never returns it.
type Endpoint uint8

// The endpoints, in the order of the spec, then the configured routes.
const (
	EndpointList    Endpoint = iota + 1 // GET /api4/public/topics/list/v1
	EndpointWhatsup                     // GET /api4/public/topic/:topic/whatsup/v1
	EndpointSeries                      // GET /api4/public/topic/:topic/time-series/v1
	EndpointTSV                         // GET /topic/:topic/time-series/:metric.tsv
	// EndpointRoute is any configured route (Request.Route says which);
	// its cost, lifetimes and allowlist are the route's own.
	EndpointRoute
)

// EndpointSpec is one row of the endpoint table: what every package needs
// to know about an endpoint that is not a setting.
type EndpointSpec struct {
	// Name is the config name, also the route label of metrics and logs
	// (a configured route's label is its own name).
	Name string
	// Path is the documented path template.
	Path string
	// TSV marks an endpoint answering tab-separated text instead of JSON.
	TSV bool
	// Topic marks an endpoint with a topic in its path.
	Topic bool
}

// endpointTable is indexed by Endpoint. Adding a built-in endpoint means a
// constant above, its row here and in Endpoints, its route in
// ParseRequest, and a value wherever config keeps one per endpoint (costs,
// TTLs, field lists): TestEndpointTable in package config walks Endpoints
// and fails for every one missing.
var endpointTable = [...]EndpointSpec{
	EndpointList:    {Name: "list", Path: listPath},
	EndpointWhatsup: {Name: "whatsup", Path: "/api4/public/topic/{topic}/whatsup/v1", Topic: true},
	EndpointSeries:  {Name: "series", Path: "/api4/public/topic/{topic}/time-series/v1", Topic: true},
	EndpointTSV:     {Name: "tsv", Path: "/topic/{topic}/time-series/{metric}.tsv", TSV: true, Topic: true},
	EndpointRoute:   {Name: "route", Path: "(configured)"},
}

// Endpoints lists every built-in endpoint, in the order of the spec: the
// names a plan may list besides its configured routes. EndpointRoute is not
// one of them.
var Endpoints = []Endpoint{EndpointList, EndpointWhatsup, EndpointSeries, EndpointTSV}

// Spec returns e's row of the endpoint table; the zero EndpointSpec for
// an invalid e.
func (e Endpoint) Spec() EndpointSpec {
	if e.Valid() {
		return endpointTable[e]
	}
	return EndpointSpec{}
}

// String returns the endpoint's config name: list, whatsup, series, tsv,
// or route; "unknown" for the zero value or any other number.
func (e Endpoint) String() string {
	if e.Valid() {
		return endpointTable[e].Name
	}
	return "unknown"
}

// Valid reports whether e is one of Endpoints or EndpointRoute.
func (e Endpoint) Valid() bool { return e >= EndpointList && int(e) < len(endpointTable) }

// EndpointNamed returns the built-in endpoint whose config name is name.
func EndpointNamed(name string) (Endpoint, bool) {
	for _, e := range Endpoints {
		if endpointTable[e].Name == name {
			return e, true
		}
	}
	return 0, false
}

// EndpointNames returns the config names of every built-in endpoint, in
// order.
func EndpointNames() []string {
	names := make([]string, len(Endpoints))
	for i, e := range Endpoints {
		names[i] = endpointTable[e].Name
	}
	return names
}

// Label returns q's route label for metrics and the access log: the
// built-in endpoint's name, or the configured route's name. The set of
// labels is bounded by the configuration.
func (q Request) Label() string {
	if q.Route != nil {
		return q.Route.Name
	}
	return q.Endpoint.String()
}
