// Package state keeps what a single trendgate instance counts for its
// customers across restarts: the quota counters of the local limiter (day
// and month, per account: the id the limiter counts quotas by), each key's
// 24-hour usage and the time it was last seen.
//
// Everything lives in one file of its own format, rewritten whole at every
// flush: written to a temporary file, synced, renamed over the old one and
// the directory synced, so a reader only ever finds a complete old or a
// complete new file. A CRC-32C over the whole file and a length in its
// header catch truncation and damage; such a file is never read in part
// (ErrDamaged). The state is small (tens of bytes per account, plus each
// key's non-zero hourly counts), so a whole rewrite each second is cheap
// and needs no page store: an embedded database such as bbolt checksums
// only its meta pages, so a damaged data page would be read as a valid
// count, and it would still need checksums of ours.
//
// A Store flushes on an interval, on demand (Sync, which the limiter calls
// before reserving past what is stored: see limits.Keeper) and a last time,
// exactly, on Close. What a crash may lose is in docs/restarts.md.
package state
