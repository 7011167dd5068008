package api

// Endpoint names one of the four API operations. It is the one vocabulary
// every package uses for them: config keys plans, costs and field lists by
// its name, the cache picks freshness by it, the limiter prices it and the
// upstream client validates bodies by it. The zero value names no
// operation; ParseRequest never returns it.
type Endpoint uint8

// The endpoints, in the order of the spec.
const (
	EndpointList    Endpoint = iota + 1 // GET /api4/public/topics/list/v1
	EndpointWhatsup                     // GET /api4/public/topic/:topic/whatsup/v1
	EndpointSeries                      // GET /api4/public/topic/:topic/time-series/v1
	EndpointTSV                         // GET /topic/:topic/time-series/:metric.tsv
)

// Endpoints lists every endpoint, in the order of the spec. Adding an
// endpoint means a constant above, its name here, its route in
// ParseRequest, and a case wherever a package keeps a value per endpoint
// (the compiler does not find those: grep for EndpointTSV).
var Endpoints = []Endpoint{EndpointList, EndpointWhatsup, EndpointSeries, EndpointTSV}

// endpointNames are the config names, indexed by Endpoint.
var endpointNames = [...]string{
	EndpointList:    "list",
	EndpointWhatsup: "whatsup",
	EndpointSeries:  "series",
	EndpointTSV:     "tsv",
}

// String returns the endpoint's config name: list, whatsup, series or tsv;
// "unknown" for the zero value or any other number.
func (e Endpoint) String() string {
	if e.Valid() {
		return endpointNames[e]
	}
	return "unknown"
}

// Valid reports whether e is one of Endpoints.
func (e Endpoint) Valid() bool { return e >= EndpointList && int(e) < len(endpointNames) }

// EndpointNamed returns the endpoint whose config name is name.
func EndpointNamed(name string) (Endpoint, bool) {
	for _, e := range Endpoints {
		if endpointNames[e] == name {
			return e, true
		}
	}
	return 0, false
}

// EndpointNames returns the config names of every endpoint, in order.
func EndpointNames() []string {
	names := make([]string, len(Endpoints))
	for i, e := range Endpoints {
		names[i] = endpointNames[e]
	}
	return names
}
