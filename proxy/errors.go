package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"trendgate/api"
	"trendgate/internal/httperr"
	"trendgate/limits"
	"trendgate/upstream"
)

var bearerChallenge = []string{`Bearer realm="trendgate"`}

// limitError is the 429 for a refused limit decision.
func limitError(d limits.Decision) *httperr.Error {
	code, msg := api.CodeRateLimited, "rate limit exceeded for this key; retry after the Retry-After delay"
	switch d.Reason {
	case limits.ReasonDaily:
		code, msg = api.CodeDailyQuotaExceeded, "daily quota exhausted for this key; it resets at 00:00 UTC"
	case limits.ReasonMonthly:
		code, msg = api.CodeMonthlyQuotaExceeded, "monthly quota exhausted for this key; it resets on the 1st at 00:00 UTC"
	}
	return &httperr.Error{Status: http.StatusTooManyRequests, Code: code, Message: msg, RetryAfter: d.RetryAfter}
}

// costError is the 403 for a request whose cost exceeds a limit of the
// key's policy outright: no wait would let it through.
func costError(e string, cost int, limit string, most int64) *httperr.Error {
	return &httperr.Error{Status: http.StatusForbidden, Code: api.CodeCostExceedsLimit,
		Message: fmt.Sprintf("a %s request costs %d units, more than this key's %s limit (%d), so it can never be served; ask the operator to change the plan or the cost", e, cost, limit, most)}
}

// failedFetchRetry is the Retry-After of a 502 or 504 from a failed
// upstream fetch, which carries no wait hint of its own. Failures are not
// cached, so a retry goes to the upstream (or meets the breaker) again; this
// is the breaker's default first backoff.
const failedFetchRetry = 5 * time.Second

// toHTTP turns any error into the client-facing error. It is the one place
// that maps internal failures to statuses: budget, 429, breaker and busy 503,
// timeouts 504, other upstream failures 502, everything unknown 500. Every
// upstream failure carries a Retry-After: the upstream package's wait hint,
// else failedFetchRetry.
func toHTTP(err error) *httperr.Error {
	var he *httperr.Error
	if errors.As(err, &he) {
		return he
	}
	withRetry := func(base *httperr.Error) *httperr.Error {
		e := *base
		e.RetryAfter = upstream.RetryAfter(err)
		if e.RetryAfter <= 0 {
			e.RetryAfter = failedFetchRetry
		}
		return &e
	}
	switch {
	case errors.Is(err, upstream.ErrBudgetExhausted):
		return withRetry(api.ErrUpstreamBudget)
	case errors.Is(err, upstream.ErrCapReached):
		return withRetry(api.ErrUpstreamCap)
	case errors.Is(err, upstream.ErrShareExhausted):
		return withRetry(api.ErrUpstreamShare)
	case errors.Is(err, upstream.ErrRateLimited):
		return withRetry(api.ErrUpstreamLimited)
	case errors.Is(err, upstream.ErrBreakerOpen):
		return withRetry(api.ErrUpstreamBreaker)
	case errors.Is(err, upstream.ErrBusy):
		return withRetry(api.ErrUpstreamBusy)
	case errors.Is(err, upstream.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return withRetry(api.ErrUpstreamTimeout)
	case errors.Is(err, upstream.ErrUnavailable):
		return withRetry(api.ErrUpstreamDown)
	case errors.Is(err, upstream.ErrBadResponse):
		return withRetry(api.ErrBadUpstream)
	case errors.Is(err, context.Canceled):
		return api.ErrClientGone
	}
	return api.ErrInternal
}

// fail writes err as the JSON error response and logs what the client is
// not told.
func (c *Chain) fail(w http.ResponseWriter, r *http.Request, err error) {
	in := infoFrom(r.Context())
	he := toHTTP(err)
	in.code = he.Code
	if he.Status >= 500 && he.Status != http.StatusServiceUnavailable || he == api.ErrInternal {
		c.log.Error("request failed", zap.String("request_id", in.id), zap.Int("status", he.Status), zap.Error(err))
	}
	if he.Status == api.ErrClientGone.Status {
		// Nobody is listening: write nothing, but record 499 so the access
		// log says so and the quota reservation is refunded.
		if in.sw.status == 0 {
			in.sw.status = he.Status
		}
		return
	}
	c.act.Refusal(in.start, he.Code)
	if he.Status == http.StatusUnauthorized {
		w.Header()["Www-Authenticate"] = bearerChallenge
	}
	httperr.Write(w, in.id, he)
}
