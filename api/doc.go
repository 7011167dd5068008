// Package api is trendgate's public contract: the four routes, the strict
// parse of a client request into a canonical Request, the versioned cache
// key and upstream path built from it, and the client-facing errors with
// their stable codes.
//
// It names and validates; it never authenticates, counts, caches, calls the
// upstream or writes a response. Everything it returns is derived from the
// request line alone, so it holds no state and is safe for concurrent use.
package api
