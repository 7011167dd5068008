// Package proxy is trendgate's request chain: one handler (Chain) that
// takes a public API request through observe, route, authenticate, check
// the plan, limit, cache, upstream, project and write (see chain.go), with
// the range-aware series cut around the fetch (package rangecut), the
// client-facing errors, and the chain's own metrics and spans.
//
// It owns the order of the steps, the request state that travels through
// them and the reloadable configuration snapshot they read (Settings); what
// each step means lives in the package named for it. It builds nothing it
// depends on: the upstream client, the cache, the limiter and the rest
// come in Deps from the process (package gateway), which imports proxy,
// never the reverse. The domain packages never import proxy, nor each
// other.
package proxy
