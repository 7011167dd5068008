// Package limits holds per-key rate limits and quotas: a cost-weighted token
// bucket per key, daily and monthly quotas over UTC calendar windows that are
// reserved at admission and refunded when a response is not delivered, the
// RateLimit header fields, and a per-IP budget for failed authentication.
//
// Two Limiter implementations exist: Local keeps state in memory for one
// instance; Redis shares the same semantics between all instances through
// Lua scripts (GCRA for the rate, atomic counters for quotas) and falls back
// to a Local at a configured share while Redis is unavailable, journaling
// quota changes and replaying them exactly once when Redis answers again.
//
// Header fields follow draft-ietf-httpapi-ratelimit-headers-11 (May 2026,
// the latest revision found): RateLimit-Policy is a structured-field List of
// policies with q (quota) and w (window, seconds); RateLimit is a List of the
// same policy names with r (remaining) and t (seconds until the quota is
// restored). See Decision.SetHeaders.
//
// QuotaResetter clears one account's day or month counter (an operator's
// reset): in a Local's memory, stored at once when a Keeper keeps the
// counters; in a Redis limiter, in Redis, for every instance, after
// replaying the journal, and in the instance's own fallback.
//
// Limits decides admission from a key id, a policy and a cost: it never
// sees the API key, the request or the response body, and it never writes
// an error response (proxy maps its reasons to the API's errors).
package limits
