package proxy

// Endpoint names one of the four API operations.
type Endpoint uint8

// The endpoints, in the order of the spec.
const (
	EndpointList Endpoint = iota + 1
	EndpointWhatsup
	EndpointSeries
	EndpointTSV
)

// String returns the endpoint's config name: list, whatsup, series or tsv.
func (e Endpoint) String() string {
	switch e {
	case EndpointList:
		return "list"
	case EndpointWhatsup:
		return "whatsup"
	case EndpointSeries:
		return "series"
	case EndpointTSV:
		return "tsv"
	}
	return "unknown"
}

// Request is a canonical API request: everything the gateway needs to key
// the cache and to build the upstream request, and nothing else.
type Request struct {
	Endpoint Endpoint
	// Topic is decoded and lower-cased ("#ai", "ai agents", "$capitalism").
	// Empty for the list endpoint.
	Topic string
	// Bucket is "hour" or "day" (series only).
	Bucket string
	// Interval is one of 1d 1w 1m 3m 6m 1y all (series only); empty when an
	// absolute window (Start, End) is used.
	Interval string
	// Start and End are the aligned absolute window in unix seconds (series
	// only); both zero when Interval is used.
	Start, End int64
	// Metric is the TSV metric (tsv only).
	Metric string
}
