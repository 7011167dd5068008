package proxy

import (
	"time"

	"trendgate/activity"
)

// What the chain counts for the operator's console (package gateway reads
// it): per-key 24 h counters and the activity of every finished request.

// withUsage gives set the per-key traffic counters of its keys: the same
// counters as before for keys that stay configured.
func (c *Chain) withUsage(set *Settings) *Settings {
	ids := make([]string, 0, len(set.cfg.Keys))
	for _, k := range set.cfg.Keys {
		ids = append(ids, k.ID)
	}
	set.usage = c.keyStats.Retain(ids)
	return set
}

// record counts a finished request in the console's counters: the key's
// 24 h counters (when a key was authenticated) and the gateway's activity.
// It runs on every request, hits included: atomic adds only.
func (c *Chain) record(in *info, status int, elapsed time.Duration) {
	topic := ""
	if in.usage != nil {
		units := 0
		if delivered(status) {
			units = in.cost
		}
		in.usage.Record(in.start, in.req.Endpoint, status, units)
		topic = in.req.Topic
	}
	c.act.Request(in.start, outcomeOf(status, in.cache), elapsed, topic)
}

// outcomeOf classifies a finished request for the dashboard rates.
func outcomeOf(status int, cacheOutcome string) activity.Outcome {
	switch {
	case status == 429:
		return activity.OutcomeLimited
	case status >= 500:
		return activity.OutcomeError
	case status >= 400:
		return activity.OutcomeRejected
	}
	switch cacheOutcome {
	case "hit", "range":
		return activity.OutcomeHit
	case "stale", "stale-if-error":
		return activity.OutcomeStale
	}
	return activity.OutcomeMiss
}
