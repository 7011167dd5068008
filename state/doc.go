// Package state keeps what a single trendgate instance counts for its
// customers across restarts: the quota counters of the local limiter (day
// and month, per account: the id the limiter counts quotas by), each key's
// 24-hour usage and the time it was last seen.
//
// Everything lives in one file of its own format, a journal: a snapshot
// record, then records of what changed, each replacing what the file held
// for the accounts and keys it names. Each record carries its length and a
// CRC-32C. An idle gateway writes nothing; a busy one appends, each
// interval, one record of the accounts whose counters changed and the keys
// counted since the previous write, so what it writes follows the traffic,
// not the number of keys. Once the records outgrow the snapshot before
// them, the file is compacted: a new file holding one snapshot is written
// to a temporary name, synced, renamed over the old one and the directory
// synced, so a reader finds the complete old journal or the complete new
// one. A last record cut short by a crash is dropped at load; any other
// damage makes the whole file refused (ErrDamaged), never read in part.
// An embedded page store such as bbolt was not used: it checksums only its
// meta pages, so a damaged data page would be read as a valid count, and
// it would need checksums of ours anyway.
//
// A Store writes on its interval, on demand (Sync, which the limiter calls
// before reserving past what is stored: see limits.Keeper; every Sync
// waiting when a write starts shares its one record and fsync) and a last
// time, exactly and whole, on Close. What a crash may lose is in
// docs/restarts.md.
package state
