// Package proxy is trendgate's HTTP gateway: the handler chain (observe,
// route, auth, limits, cache, upstream, project, write), the API routes and
// the canonical Request, plan projection, response writing, and the public,
// admin and TLS servers.
package proxy
