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
// A Store holds the Doc. On a single instance it is a YAML file written
// atomically (a reader finds the old file or the new one whole). In
// cluster mode the Doc lives in one Redis hash that every instance polls
// (a one-field read twice a second), and each instance keeps the file as
// well: when Redis comes back empty (it keeps nothing on disk) the first
// instance to see it writes its copy back, so a Redis restart loses no
// key.
package keystore
