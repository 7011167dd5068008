package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"go.uber.org/zap"

	"trendgate/api"
	"trendgate/auth"
	"trendgate/internal/httperr"
	"trendgate/limits"
)

// cors adds the CORS headers of the snapshot's policy (server.cors) and
// answers an allowed preflight before routing, authentication and limits,
// so it spends nothing. With CORS off it only passes the request on.
func (c *Chain) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if infoFrom(r.Context()).set.cors.Serve(w, r) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// route parses the request into its canonical form. Unknown paths under the
// API prefixes answer 401 to callers without a valid key, so routes cannot
// be enumerated anonymously.
func (c *Chain) route(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := infoFrom(r.Context())
		if m := in.memo; m != nil {
			if req, key, ok := m.route(r, in.set.gen); ok {
				in.req, in.key, in.routed = req, key, true
				next.ServeHTTP(w, r)
				return
			}
		}
		// now only decides which starts without end are near the
		// upstream's own now (kept to the second): its clock, as last seen.
		req, err := in.set.routes.Parse(r, in.start.Add(time.Duration(c.upstreamSkew.Load())*time.Second))
		if err != nil {
			if r.ProtoMajor == 1 && (r.ContentLength != 0 || len(r.TransferEncoding) > 0) {
				// A body we refuse is not read: close after answering, so
				// bytes framed one way by a client and another way by a
				// front proxy can never be read as a request (RFC 9112 §6.3;
				// with Content-Length and Transfer-Encoding both, a must).
				w.Header().Set("Connection", "close")
			}
			if errors.Is(err, api.ErrNotFound) && isAPIPath(r.URL.EscapedPath()) {
				if _, _, aerr := c.principal(r); aerr != nil {
					err = aerr
				}
			}
			c.policyForValidKey(w, r)
			if he := (*httperr.Error)(nil); errors.As(err, &he) && he.Status == http.StatusMethodNotAllowed {
				w.Header().Set("Allow", api.AllowedMethods)
			}
			c.fail(w, r, err)
			return
		}
		in.req, in.routed = req, true
		if in.memo != nil {
			in.key = in.memo.keepRoute(r, in.set.gen, req)
		}
		next.ServeHTTP(w, r)
	})
}

// policyForValidKey sets the RateLimit-Policy of the request's key on a
// response refused by routing (400, 404, 405), when the request carries a
// valid, active key, so that every response to a valid key carries its
// rate-limit policy. The limiter is not consulted (nothing is spent, so
// there is no RateLimit state to give), and a key that is not valid is
// neither counted as a failed attempt here nor answered differently: this
// only reads the keyring.
func (c *Chain) policyForValidKey(w http.ResponseWriter, r *http.Request) {
	if len(r.Header["Authorization"]) == 0 {
		return
	}
	in := infoFrom(r.Context())
	token, err := auth.ParseAuthorization(r.Header)
	if err != nil {
		return
	}
	p, err := in.set.keyring.Authenticate(token, in.start)
	if err != nil {
		return
	}
	limits.SetPolicyHeader(w.Header(), in.set.policies.get(p.KeyID), in.start)
}

// isAPIPath reports whether p is under one of the API's path prefixes.
func isAPIPath(p string) bool {
	return strings.HasPrefix(p, "/api4/") || strings.HasPrefix(p, "/topic/")
}

// authenticate resolves the Bearer key to a Principal and its plan. Failed
// attempts are limited per client IP; no state is kept per invalid key.
func (c *Chain) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := infoFrom(r.Context())
		_, sp := c.startSpan(r.Context(), in, "auth")
		if km := in.memo.authenticated(r, in.set.gen, in.start); km != nil {
			if in.traced {
				traceAuth(sp, km.p, nil)
			}
			sp.End()
			in.keyID, in.account, in.plan, in.policy, in.usage = km.p.KeyID, km.p.Account, km.plan, km.policy, km.usage
			next.ServeHTTP(w, r)
			return
		}
		p, span, err := c.principal(r)
		if in.traced {
			traceAuth(sp, p, err)
		}
		sp.End()
		if err != nil {
			c.fail(w, r, err)
			return
		}
		// The keyring and these maps come from one snapshot, compiled
		// together: a key it accepts has both.
		in.keyID, in.account, in.plan, in.policy = p.KeyID, p.Account, in.set.plans[p.Plan], in.set.policies.get(p.KeyID)
		in.usage = in.set.usage[p.KeyID]
		if in.memo != nil {
			in.memo.keepKey(r, in.set.gen, p, span, in)
		}
		next.ServeHTTP(w, r)
	})
}

// principal authenticates r's Bearer key. A valid, active key is always
// accepted: the per-IP limit on failed attempts exists to slow guessing,
// and a valid key is not a guess. Only a presented key that is not valid
// counts as a failure, and only such requests are refused while their
// address is blocked; a missing key is a plain 401. Its errors are
// client-facing. An accepted key comes with the span the keyring accepts
// it in.
func (c *Chain) principal(r *http.Request) (auth.Principal, auth.Span, error) {
	in := infoFrom(r.Context())
	set := in.set
	token, err := auth.ParseAuthorization(r.Header)
	var known auth.Principal // a refused key the keyring knows (disabled, expired)
	if err == nil {
		var span auth.Span
		if known, span, err = set.keyring.AuthenticateSpan(token, in.start); err == nil {
			return known, span, nil
		}
	}
	switch {
	case errors.Is(err, auth.ErrDuplicateHeader):
		return auth.Principal{}, auth.Span{}, api.ErrDuplicateAuth
	case errors.Is(err, auth.ErrMissingKey):
		c.metrics.authFailures.WithLabelValues("missing").Inc()
		return auth.Principal{}, auth.Span{}, api.ErrMissingKey
	}
	ip := clientIP(r, set.trusted)
	if blocked, retry := c.authFail.Blocked(ip); blocked {
		c.metrics.authFailures.WithLabelValues("blocked").Inc()
		e := *api.ErrAuthBlocked
		e.RetryAfter = retry
		return auth.Principal{}, auth.Span{}, &e
	}
	c.authFail.Record(ip)
	reason := string(auth.ReasonOf(err))
	c.metrics.authFailures.WithLabelValues(reason).Inc()
	if known.KeyID != "" {
		// An issued key refused by configuration: the operator wants to
		// know whose, and why (the client only sees invalid_api_key).
		c.log.Info("key refused", zap.String("request_id", in.id), zap.String("key_id", known.KeyID),
			zap.String("reason", reason), zap.String("ip", ip))
	} else if ce := c.log.Check(zap.DebugLevel, "key refused"); ce != nil {
		ce.Write(zap.String("request_id", in.id), zap.String("reason", reason), zap.String("ip", ip))
	}
	if errors.Is(err, auth.ErrNotBearer) {
		return auth.Principal{}, auth.Span{}, api.ErrInvalidKeyNoBearer
	}
	return auth.Principal{}, auth.Span{}, api.ErrInvalidKey
}

// clientIP is the peer address, or the right-most untrusted address of
// X-Forwarded-For when the peer is a trusted proxy.
func clientIP(r *http.Request, trusted []netip.Prefix) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || len(trusted) == 0 || !isTrusted(peer, trusted) {
		return host
	}
	xff := r.Header.Values("X-Forwarded-For")
	for i := len(xff) - 1; i >= 0; i-- {
		parts := strings.Split(xff[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return peer.String() // a garbled hop: trust nothing beyond it
			}
			if !isTrusted(a, trusted) {
				return a.String()
			}
		}
	}
	return peer.String()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	a = a.Unmap()
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// checkPlan refuses, with 403 and before the limiter spends anything, an
// endpoint, configured route or TSV metric the key's plan does not
// include, and a route without a limited form for a limited plan. Such a response
// carries the key's RateLimit-Policy but no RateLimit: the limiter was not
// consulted.
func (c *Chain) checkPlan(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := infoFrom(r.Context())
		req := in.req
		var err error
		switch {
		case req.Route != nil:
			err = routeAllowed(in.plan, req.Route)
		case !in.plan.endpoints[req.Endpoint]:
			err = api.ErrNotInPlan
		case req.Endpoint == api.EndpointTSV && in.plan.proj != nil && !in.plan.proj.AllowsMetric(req.Metric):
			err = api.ErrMetricNotInPlan
		}
		if err != nil {
			limits.SetPolicyHeader(w.Header(), in.policy, in.start)
			c.fail(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// routeAllowed returns the 403 for configured route rt under plan p, or
// nil: p must list it, and a limited plan needs its allowlist.
func routeAllowed(p *plan, rt *api.Route) error {
	switch {
	case !p.routes[rt.Name]:
		return api.ErrNotInPlan
	case p.proj != nil && rt.LimitedFields == nil:
		return api.ErrRouteNotLimited
	}
	return nil
}

// limit admits the request against the key's token bucket and quotas and
// sets the RateLimit headers on every response. A quota reservation is
// given back unless the response is delivered as 2xx or 304.
func (c *Chain) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := infoFrom(r.Context())
		in.cost = cost(in.req, in.set.costs)
		if limit, most := in.policy.Unservable(in.cost); limit != "" {
			// Possible only when costs changed under a plan: config check
			// refuses such plans. Waiting would never help, so no 429.
			limits.SetPolicyHeader(w.Header(), in.policy, in.start)
			c.fail(w, r, costError(in.req.Label(), in.cost, limit, most))
			return
		}
		actx, sp := c.startSpan(r.Context(), in, "limits admit")
		subject := limits.Subject{Key: in.keyID, Account: in.account}
		d, err := c.limiter.Admit(actx, subject, in.policy, in.cost)
		if in.traced {
			traceAdmit(sp, d, err)
		}
		sp.End()
		if err != nil {
			c.fail(w, r, err)
			return
		}
		d.SetHeaders(w.Header())
		if !d.Allowed {
			// The account cannot be served for now: it must not hold a
			// reservation of the upstream budget others could use.
			c.up.Withdraw(context.WithoutCancel(r.Context()), in.account)
			c.metrics.limited.WithLabelValues(string(d.Reason)).Inc()
			c.fail(w, r, limitError(d))
			return
		}
		refund := func() {
			if err := c.limiter.Refund(context.WithoutCancel(r.Context()), subject, d); err != nil {
				c.log.Warn("quota refund failed", zap.String("request_id", in.id), zap.String("key_id", in.keyID), zap.Error(err))
			}
		}
		defer func() { // a panic below is answered with a 500 by observe: refund it
			if p := recover(); p != nil {
				refund()
				panic(p)
			}
		}()
		next.ServeHTTP(w, r)
		if sw, _ := w.(*statusWriter); sw != nil && delivered(sw.status) {
			c.metrics.charge(in.keyID, in.account, in.cost)
			in.charged, in.chargedDay = true, d.Day
			return
		}
		refund()
	})
}

// delivered reports whether a response with this status counts against
// the key's quota: 2xx and 304 only (0 means nothing was written: 200).
func delivered(status int) bool {
	return status == 0 || status == http.StatusNotModified || (status >= 200 && status < 300)
}
