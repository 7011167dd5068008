package proxy

import (
	"time"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/upstream"
)

// What the upstream is known to refuse is refused here, without a call
// (see docs/upstream-bounds.md): a window given only a start ends at the
// upstream's now, and the upstream answers 400 when start is not before
// it. Anything else the upstream answers 400 is its own verdict on the
// canonical request, kept as an entry for rejectedFor (api.ErrUpstreamRejected),
// so a client repeating it costs no further call.

// rejectedFor is how long the upstream's 400 for a request is kept.
const rejectedFor = time.Minute

// observeClock notes how far the upstream's clock is from ours, by the
// generated time of resp, its answer to q received at now. Only the list
// and series are regenerated within a minute; whatsup summaries lag by
// hours and say nothing of the clock.
func (c *Chain) observeClock(q api.Request, resp *upstream.Response, now time.Time) {
	if resp.Generated > 0 && (q.Endpoint == api.EndpointSeries || q.Endpoint == api.EndpointList) {
		c.upstreamSkew.Store(resp.Generated - now.Unix())
		c.skewKnown.Store(true)
	}
}

// answers reports whether e, the entry under req's key, answers req: not
// when req's window has only a start and e's data was generated (by the
// upstream's clock) at or before the client's own start, a window the
// upstream refused then. Every start in one bucket shares a key
// (api.Request.ClientStart), so an entry filled or cut for an earlier
// start in it may predate a later one.
func answers(req api.Request, e *cache.Entry) bool {
	return req.End != 0 || e == nil || e.Generated <= 0 || req.ClientStart() < e.Generated
}

// futureStartSlack is how far past the upstream's now, as last observed,
// a start must lie to be refused here: the observation (config.generated)
// may lag the upstream's clock by up to a minute, so a start closer than
// this may not be in the future for the upstream. Such a start is
// forwarded, and the upstream's 400 kept.
const futureStartSlack = 2 * time.Minute

// refuseEarly returns api.ErrStartInFuture for req, a series window given
// only a start, when that start lies in the future by the upstream's
// clock; nil otherwise, and always while that clock is not known yet (the
// upstream's clock is its own: before its first answer, ours says
// nothing of it).
func (c *Chain) refuseEarly(req api.Request) error {
	if req.Endpoint != api.EndpointSeries || req.Route != nil || req.Start == 0 || req.End != 0 || !c.skewKnown.Load() {
		return nil
	}
	upstreamNow := c.clk.Now().Add(time.Duration(c.upstreamSkew.Load()) * time.Second)
	if req.Start >= upstreamNow.Add(futureStartSlack).Unix() {
		return api.ErrStartInFuture
	}
	return nil
}
