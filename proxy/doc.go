// Package proxy composes trendgate: it wires auth, limits, cache, upstream,
// projection and certificates into one handler chain (observe, route, auth,
// limits, cache, upstream, project, write; see chain.go), and runs the
// public, plain-HTTP and admin servers with reload and graceful drain.
//
// It owns the order of the steps and the request state that travels through
// them; what each step means lives in the package named for it. The domain
// packages never import proxy, nor each other.
package proxy
