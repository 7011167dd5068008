package proxy

import (
	"time"

	"trendgate/activity"
	"trendgate/rollup"
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

// KeyStats returns the per-key 24 h counters of every snapshot: the keys
// in force, and those counted since the state file last took them.
func (c *Chain) KeyStats() *activity.Keys { return &c.keyStats }

// record counts a finished request in the console's counters: the key's
// 24 h counters (when a key was authenticated) and the gateway's activity.
// It runs on every request, hits included: atomic adds only. A usage read
// (usage.go) is not the key's traffic: its counters skip it.
func (c *Chain) record(in *info, status int, elapsed time.Duration) {
	topic := ""
	if in.usage != nil && in.routed {
		units := 0
		if delivered(status) {
			units = in.cost
		}
		in.usage.Record(in.start, in.req.Endpoint, status, units)
		topic = in.req.Topic
		if c.rollups != nil {
			c.recordRollup(in, status)
		}
	}
	c.act.Request(in.start, outcomeOf(status, in.cache), elapsed, topic)
}

// recordRollup adds a finished request to the usage history: its route
// and outcome class, the bytes sent and, when it was charged, its units,
// in the day the limiter charged them (so that an account's daily units
// add up to what its quota counters charged). The upstream calls it caused
// are added as they are sent (fetchFor).
func (c *Chain) recordRollup(in *info, status int) {
	e := rollup.Event{
		Day:      rollup.DateOf(in.start),
		Account:  in.account,
		Key:      in.keyID,
		Route:    in.req.Label(),
		Class:    rollup.ClassOf(status),
		Requests: 1,
		Bytes:    int64(in.sw.bytes),
	}
	if in.charged {
		e.Units = int64(in.cost)
		if in.chargedDay != 0 {
			e.Day = rollup.Date(in.chargedDay)
		}
	}
	c.rollups.Record(e)
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
