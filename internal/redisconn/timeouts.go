package redisconn

import "time"

// The Redis timeouts of the gateway, in one place. Each bounds one kind
// of Redis work; the packages that do the work take them from here, so
// that what a Redis outage costs each path can be read and compared in
// one list.
const (
	// CommandTimeout bounds one command on the request path (the cache
	// tier, its fill locks and purge bus, the rate limits and quotas): the
	// default of redis.timeout. A request that waits for Redis longer
	// than this falls back rather than waits.
	CommandTimeout = 50 * time.Millisecond
	// BudgetTimeout bounds one operation of the shared upstream budget
	// when its caller passes none: a cold miss is already waiting for the
	// upstream, so it may wait longer than a hit.
	BudgetTimeout = 200 * time.Millisecond
	// StartupTimeout bounds the checks made once at start (the CONFIG GET
	// calls that read Redis's persistence settings).
	StartupTimeout = 2 * time.Second
	// CertTimeout is the floor for each command of the certificate storage
	// and the session ticket keys: a certificate bundle is larger than a
	// counter and rarely read, so redis.timeout's short default does not
	// apply to it.
	CertTimeout = 2 * time.Second
	// CertReleaseTimeout bounds the release of the certificate locks a
	// storage still holds when it closes.
	CertReleaseTimeout = 5 * time.Second
	// KeyStoreTimeout bounds one command of the key store (its polls,
	// edits and revocations) when its caller passes none.
	KeyStoreTimeout = time.Second
	// SnapshotTimeout is the floor for writing or reading a whole key
	// snapshot, which at 100,000 keys is megabytes.
	SnapshotTimeout = 10 * time.Second
)
