package proxy

import (
	"context"

	"trendgate/cache"
)

// Cache-Status and Cache-Control of a pass-through route's answer: the
// gateway was configured not to cache it (RFC 9211 fwd=bypass), and
// nobody downstream should store it either.
var (
	statusBypass = []string{"trendgate; fwd=bypass"}
	noStore      = []string{"no-store"}
)

// passThrough answers in's request, for a configured route with
// cache: false, with an upstream call of its own: the cache is neither
// asked nor filled, in any tier, and the call is not coalesced with
// another request's, since each call may change something upstream. The
// call is claimed for in's key like a cold miss (budget, fair share,
// breaker) and runs on the request's context, bounded by
// cache.fetch_timeout: a client that leaves cancels only its own call.
// The answer is a Miss whose entry nothing holds but this response.
func (c *Chain) passThrough(ctx context.Context, in *info) (cache.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, in.set.ttl.FetchTimeout)
	defer cancel()
	e, err := c.fetchFor(ctx, in, false)
	if err != nil {
		return cache.Result{}, err
	}
	if e == nil {
		return cache.Result{}, cache.ErrNoEntry
	}
	return cache.Result{Entry: e, Outcome: cache.Miss}, nil
}
