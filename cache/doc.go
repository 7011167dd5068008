// Package cache is trendgate's response cache: one entry per canonical
// request holding the upstream's full validated representation, with the
// gateway's own freshness rules (fresh, stale-while-revalidate,
// stale-if-error), coalesced fetches, a byte-bounded local tier (ristretto)
// and an optional shared tier in Redis with cross-instance leases and a
// purge bus that carries purges to every instance's local tier
// (purgebus.go). The
// local tier can be saved to a snapshot file and loaded back, entry by
// entry validated, so a restart keeps it (persist.go).
//
// Freshness is decided here, from an injected clock; the backing stores only
// hold entries and may drop them at any time (ristretto may drop a Set, Redis
// may be unreachable), so nothing in this package depends on a Set being
// visible.
//
// The cache holds upstream representations as the upstream sent them: it
// never sees an API key, a plan or a projection, and it never calls the
// upstream itself; the caller's fetch function does, under the caller's
// budget.
package cache
