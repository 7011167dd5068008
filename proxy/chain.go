package proxy

import "net/http"

// chain builds the public handler. Read it top to bottom: the first
// middleware listed is the outermost.
func (g *Gateway) chain() http.Handler {
	return compose(http.HandlerFunc(g.serveAPI),
		g.observe,      // 1. request id, panic recovery, access log, metrics
		g.cors,         // 1b. CORS headers; preflights answered here, spending nothing
		g.selfUsage,    // 1c. GET /trendgate/v1/usage answered by its own chain (usage.go)
		g.route,        // 2. strict parse into a canonical Request; 400/404/405
		g.authenticate, // 3. Bearer key → Principal; 401
		g.checkPlan,    // 3b. endpoint and metric in the key's plan; 403, costs nothing
		g.limit,        // 4. per-key token bucket and quotas; 429
	) // 5-8. serveAPI: cache, upstream, projection, write
}

// compose wraps h in mws so that mws[0] is the outermost.
func compose(h http.Handler, mws ...func(http.Handler) http.Handler) http.Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}
