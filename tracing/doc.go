// Package tracing sets up OpenTelemetry tracing for the gateway: the span
// exporter (OTLP over HTTP or gRPC, from the OpenTelemetry Go SDK), a
// parent-based ratio sampler whose ratio a reload can change, and the W3C
// Trace Context propagator. With the exporter "none" (the default) New
// returns a nil *Provider and nothing runs: callers keep tracing work off
// their hot paths with a nil check.
package tracing
