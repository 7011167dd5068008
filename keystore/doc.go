// Package keystore keeps the changes operators make to keys and accounts
// through the admin key API: keys created (only their digests), keys
// revoked or given an end by a rotation, and accounts' quota overrides.
//
// The configuration file stays the operator's: nothing here rewrites it.
// The changes live in a Doc of their own, which Apply lays over the
// configuration to give the keys and accounts in force; a reload of the
// file keeps them. A Doc is versioned: every edit makes version n+1 out of
// version n, and an edit made against a version that is no longer the
// latest is redone on the latest, so two operators editing at once lose
// nothing.
//
// A Store holds the Doc. An edit writes only the records it touches (a
// Patch): on a single instance it is appended to the keys file, a log of
// checksummed records compacted now and then (file.go); in cluster mode it
// is one field of a Redis hash beside a snapshot, which every instance
// polls (a one-field read twice a second) and reads only the records it
// lacks (redis.go). Each instance keeps the file as well: when Redis comes
// back empty (it keeps nothing on disk) the first instance to see it
// writes its copy back, so a Redis restart loses no key. Revoked keys stay
// as tombstones for a retention, so their ids are not given out again by
// accident, and a revocation that cannot reach Redis is applied on the
// instance at once and stored when Redis is back (pending.go).
package keystore
