// Package api is trendgate's public contract: the endpoint table (the four
// built-in endpoints) and the operator's configured routes (Routes), the
// strict parse of a client request into a canonical Request, the versioned
// cache key and upstream path built from it, the client-facing errors with
// their stable codes, and the OpenAPI document.
//
// It names and validates; it never authenticates, counts, caches, calls the
// upstream or writes a response. Everything it returns is derived from the
// request line alone (and the compiled routes, which are immutable), so it
// holds no state and is safe for concurrent use.
package api
