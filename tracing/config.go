package tracing

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// The exporters Config.Exporter names.
const (
	ExporterNone     = "none"
	ExporterOTLPHTTP = "otlp-http"
	ExporterOTLPGRPC = "otlp-grpc"
)

// Config configures tracing. The zero value, like DefaultConfig, traces
// nothing (Exporter "" means none).
type Config struct {
	// Exporter is "none" (the default: no spans are made or sent),
	// "otlp-http" (OTLP/HTTP protobuf) or "otlp-grpc".
	Exporter string `yaml:"exporter"`
	// Endpoint is the collector: for otlp-http its base URL, e.g.
	// http://tempo:4318 (spans are posted to its /v1/traces); for
	// otlp-grpc its URL, e.g. http://jaeger:4317 (http:// sends without
	// TLS). Empty leaves it to the OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT
	// environment variables, else the SDK's default (localhost:4318 or
	// localhost:4317).
	Endpoint string `yaml:"endpoint"`
	// Headers are sent with every export (e.g. an Authorization for a
	// hosted collector); they replace OTEL_EXPORTER_OTLP_HEADERS when set.
	// Values may be secret: they are never logged.
	Headers map[string]string `yaml:"headers"`
	// Ratio is the share (0..1) of requests that start a sampled trace
	// (default 1); with TrustIncoming, a request carrying a traceparent
	// follows its sampled flag instead. A reload changes it.
	Ratio float64 `yaml:"ratio"`
	// TrustIncoming makes a request's traceparent the parent of its span
	// (its trace id, its sampled flag, its tracestate within the W3C
	// limits): only for clients that are part of the same system. Off
	// (the default), the request starts a trace of the gateway's own,
	// sampled by Ratio alone, with a link to the client's span. A reload
	// changes it.
	TrustIncoming bool `yaml:"trust_incoming"`
}

// DefaultConfig is tracing off, with ratio 1 for when an exporter is set.
func DefaultConfig() Config {
	return Config{Exporter: ExporterNone, Headers: map[string]string{}, Ratio: 1}
}

// Enabled reports whether c exports spans.
func (c Config) Enabled() bool { return c.Exporter != "" && c.Exporter != ExporterNone }

// Validate reports every problem in c, one per line, each starting with
// the setting's name (under tracing:). Header values never appear in it.
func (c Config) Validate() error {
	var errs []error
	switch c.Exporter {
	case "", ExporterNone, ExporterOTLPHTTP, ExporterOTLPGRPC:
	default:
		errs = append(errs, fmt.Errorf("exporter: must be none, otlp-http or otlp-grpc, got %q", c.Exporter))
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			errs = append(errs, errors.New("endpoint: must be an http:// or https:// URL such as http://127.0.0.1:4318"))
		case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
			errs = append(errs, errors.New("endpoint: must not carry a query, a fragment or credentials (use tracing.headers)"))
		case c.Exporter == ExporterOTLPGRPC && strings.Trim(u.Path, "/") != "":
			errs = append(errs, errors.New("endpoint: an otlp-grpc endpoint has no path (http://host:4317)"))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Headers)) {
		if name == "" || strings.ContainsAny(name, " \t\r\n:") {
			errs = append(errs, fmt.Errorf("headers: %q is not a header name", name))
		}
		if strings.ContainsAny(c.Headers[name], "\r\n") {
			errs = append(errs, fmt.Errorf("headers.%s: the value must be one line", name))
		}
	}
	if !(c.Ratio >= 0 && c.Ratio <= 1) { // NaN too
		errs = append(errs, fmt.Errorf("ratio: must be between 0 and 1, got %v", c.Ratio))
	}
	return errors.Join(errs...)
}
