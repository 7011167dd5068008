package cache

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"trendgate/api"
	"trendgate/internal/atomicfile"
)

// A snapshot file holds the local tier's entries so that a restart does not
// replay the cold start against the upstream budget. Each entry is stored
// in the shared tier's encoding (encodeEntry: magic, schema version,
// canonical key, fields, body), so there is one entry codec, not two. The
// file around them:
//
//	header   "tgsnap", format version (1 byte), codec schema version
//	         (1 byte), written at (varint, unix ns), SHA-256 of
//	         SnapshotOptions.Origin (32 bytes), CRC-32C of the header bytes
//	         before it (4 bytes, big-endian)
//	records  'e', length n (uvarint), n bytes of encodeEntry, CRC-32C of
//	         those n bytes (4 bytes); newest Fetched first
//	trailer  'z', record count (uvarint), CRC-32C of the trailer bytes
//	         before it (4 bytes); nothing may follow
//
// A file whose header, framing, checksums, record decoding or trailer fail
// is rejected whole (ErrInvalidSnapshot): after a bad length nothing that
// follows can be trusted, and a missing trailer means a truncated file.
// Entries of a sound file are then checked one by one (see LoadSnapshot).
const (
	snapshotMagic   = "tgsnap"
	snapshotVersion = 1
	tagEntry        = 'e'
	tagTrailer      = 'z'
	crcLen          = 4
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrInvalidSnapshot is wrapped by LoadSnapshot's error for a file that is
// not a complete, intact snapshot of this version: foreign, corrupt or
// truncated. Nothing of such a file is loaded.
var ErrInvalidSnapshot = errors.New("cache: invalid snapshot file")

// Reasons an entry is left out of a snapshot or of the tier, the keys of
// SnapshotStats.Dropped.
const (
	// DropExpired: at or past FreshUntil+MaxStale, so it could not be
	// served even on error.
	DropExpired = "expired"
	// DropKey: the canonical key does not parse back to itself with
	// today's rules (SnapshotOptions.ParseKey), or its topic is not the
	// key's.
	DropKey = "key"
	// DropStatus: a status the cache never stores (only 200 and 404).
	DropStatus = "status"
	// DropFetched: no fetch time, or one after now.
	DropFetched = "fetched"
	// DropDuplicate: a second entry for a key already loaded.
	DropDuplicate = "duplicate"
	// DropBound: past SnapshotOptions.MaxBytes (the oldest go first).
	DropBound = "bound"
	// DropRejected: the tier did not keep it (ristretto's admission).
	DropRejected = "rejected"
	// DropInvalid: SnapshotOptions.Revalidate refused it: a body or status
	// its request could not have had from the upstream.
	DropInvalid = "invalid"
)

// SnapshotOptions are the limits of SaveSnapshot and LoadSnapshot.
type SnapshotOptions struct {
	// MaxBytes bounds the file (must be > 0): a save leaves out the oldest
	// entries that would not fit, and a load keeps only the newest records
	// that fit, for a file written under a larger bound.
	MaxBytes int64
	// MaxStale is Config.MaxStale: entries at or past FreshUntil+MaxStale
	// are neither saved nor loaded.
	MaxStale time.Duration
	// Now is the injected clock's current time.
	Now time.Time
	// Origin names where the entries come from (the gateway passes the
	// upstream's base URL and, in cluster mode, the purge generation). A
	// file written for another origin is rejected whole, so a gateway moved
	// to another upstream never serves the old one's data, nor one
	// restarted after a cluster purge what was purged. Only its SHA-256 is
	// stored.
	Origin string
	// Revalidate judges each entry of a sound file on load, with the
	// request its key parses to: it returns until when the entry is fresh
	// by today's rules, from its fetch time, or an error for a body or
	// status the upstream could not have sent for that request (the entry
	// is dropped: DropInvalid). The FreshUntil stored in the file is never
	// used: checksums catch accidents, not edits. Nil makes every loaded
	// entry stale from its fetch time (served only as stale, if at all).
	Revalidate func(e *Entry, q api.Request) (freshUntil time.Time, err error)
	// Key, when not empty, authenticates the file: a save appends an
	// HMAC-SHA256 of everything before it, and a load refuses a file whose
	// HMAC is missing or does not match, before reading any entry.
	Key []byte
	// ParseKey checks each loaded entry's key as api.ParseKey does (the
	// gateway passes its configured routes' api.Routes.ParseKey); nil
	// means api.ParseKey.
	ParseKey func(key string, now time.Time) (api.Request, error)
}

// SnapshotStats say what a save or a load did.
type SnapshotStats struct {
	// Entries is the number of entries written, or loaded into the tier.
	Entries int
	// Bytes is the size of the file written or read.
	Bytes int64
	// Dropped counts the entries left out, by reason (Drop...).
	Dropped map[string]int
}

func (s *SnapshotStats) drop(reason string) {
	if s.Dropped == nil {
		s.Dropped = make(map[string]int)
	}
	s.Dropped[reason]++
}

// SaveSnapshot writes l's entries that can still be served to path,
// atomically: a temporary file in the same directory (mode 0600, as the
// file holds cached API data), synced, renamed over path, and the
// directory synced. Entries are written newest first until MaxBytes; a
// failed save leaves any previous file at path as it was.
func (l *Local) SaveSnapshot(path string, opts SnapshotOptions) (SnapshotStats, error) {
	entries := l.entries()
	slices.SortFunc(entries, func(a, b *Entry) int {
		if c := b.Fetched.Compare(a.Fetched); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return writeSnapshot(path, entries, opts)
}

// writeSnapshot writes entries, in their order, as SaveSnapshot describes.
func writeSnapshot(path string, entries []*Entry, opts SnapshotOptions) (stats SnapshotStats, err error) {
	if opts.MaxBytes <= 0 {
		return stats, errors.New("cache: snapshot: max bytes must be > 0")
	}
	var size int64
	err = atomicfile.WriteFunc(path, 0o600, func(f io.Writer) error {
		var out io.Writer = f
		var mac hash.Hash
		if len(opts.Key) > 0 {
			mac = hmac.New(sha256.New, opts.Key)
			out = io.MultiWriter(f, mac)
		}
		w := bufio.NewWriterSize(out, 256<<10)
		header := appendHeader(nil, opts.Now, opts.Origin)
		size = int64(len(header))
		_, _ = w.Write(header)
		trailerMax := int64(1 + binary.MaxVarintLen64 + crcLen)
		if mac != nil {
			trailerMax += sha256.Size
		}
		var rec []byte
		for _, e := range entries {
			if !opts.Now.Before(e.FreshUntil.Add(opts.MaxStale)) {
				stats.drop(DropExpired)
				continue
			}
			body := encodeEntry(e)
			rec = append(rec[:0], tagEntry)
			rec = binary.AppendUvarint(rec, uint64(len(body)))
			if size+int64(len(rec)+len(body)+crcLen)+trailerMax > opts.MaxBytes {
				stats.drop(DropBound)
				continue
			}
			rec = append(rec, body...)
			rec = binary.BigEndian.AppendUint32(rec, crc32.Checksum(body, crcTable))
			_, _ = w.Write(rec)
			size += int64(len(rec))
			stats.Entries++
		}
		trailer := binary.AppendUvarint([]byte{tagTrailer}, uint64(stats.Entries))
		trailer = binary.BigEndian.AppendUint32(trailer, crc32.Checksum(trailer, crcTable))
		_, _ = w.Write(trailer)
		size += int64(len(trailer))
		// bufio.Writer keeps its first error and returns it from Flush.
		if err := w.Flush(); err != nil {
			return err
		}
		if mac != nil {
			if _, err := f.Write(mac.Sum(nil)); err != nil {
				return err
			}
			size += sha256.Size
		}
		return nil
	})
	// A directory that could not be synced leaves the new file in place
	// all the same: the save has happened.
	if err != nil && !errors.Is(err, atomicfile.ErrNotDurable) {
		return stats, fmt.Errorf("cache: snapshot: %w", err)
	}
	stats.Bytes = size
	return stats, nil
}

// appendHeader appends a snapshot header written at now for origin.
func appendHeader(b []byte, now time.Time, origin string) []byte {
	start := len(b)
	b = append(b, snapshotMagic...)
	b = append(b, snapshotVersion, schemaVersion)
	b = binary.AppendVarint(b, now.UnixNano())
	sum := sha256.Sum256([]byte(origin))
	b = append(b, sum[:]...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], crcTable))
}

// LoadSnapshot reads the snapshot at path into l. The file must be whole
// and intact (header of this format and codec version, every record's
// checksum and decoding, the trailer's count); otherwise nothing is loaded
// and the error wraps ErrInvalidSnapshot. A missing file is an error
// wrapping os.ErrNotExist. Each entry of a sound file is then checked and
// left out (counted in Dropped) when its key does not parse back to itself
// with api.ParseKey at opts.Now or its topic differs (DropKey), its status
// is not 200 or 404, its fetch time is unknown or after now, it is at or
// past FreshUntil+MaxStale, it repeats a key, or it falls past MaxBytes.
// A file written for another SnapshotOptions.Origin is rejected whole.
// The others are stored in l with their own Fetched and FreshUntil, so
// they are served fresh, stale or not at all by the usual rules, with Age
// counted from their original fetch. l should be empty and not yet
// serving.
func (l *Local) LoadSnapshot(path string, opts SnapshotOptions) (SnapshotStats, error) {
	var stats SnapshotStats
	if opts.MaxBytes <= 0 {
		return stats, errors.New("cache: snapshot: max bytes must be > 0")
	}
	f, err := os.Open(path)
	if err != nil {
		return stats, fmt.Errorf("cache: snapshot: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return stats, fmt.Errorf("cache: snapshot: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return stats, fmt.Errorf("%w: %s is not a regular file", ErrInvalidSnapshot, path)
	}
	stats.Bytes = fi.Size()
	var body io.Reader = f
	size := fi.Size()
	if len(opts.Key) > 0 {
		if err := checkMAC(f, size, opts.Key); err != nil {
			return stats, fmt.Errorf("%w: %s: %v", ErrInvalidSnapshot, path, err)
		}
		size -= sha256.Size
		body = io.LimitReader(f, size)
	}
	entries, dropped, err := readSnapshot(bufio.NewReaderSize(body, 256<<10), size, opts)
	if err != nil {
		return stats, err
	}
	stats.Dropped = dropped.Dropped
	ctx := context.Background()
	for _, e := range entries {
		l.Set(ctx, e)
		if _, ok := l.Get(ctx, e.Key); ok {
			stats.Entries++
		} else {
			stats.drop(DropRejected)
		}
	}
	return stats, nil
}

// readSnapshot parses a whole snapshot of size bytes from r and returns
// the entries that pass the per-entry checks, newest first.
func readSnapshot(br *bufio.Reader, size int64, opts SnapshotOptions) ([]*Entry, SnapshotStats, error) {
	var stats SnapshotStats
	invalid := func(format string, args ...any) ([]*Entry, SnapshotStats, error) {
		return nil, stats, fmt.Errorf("%w: %s", ErrInvalidSnapshot, fmt.Sprintf(format, args...))
	}
	r := &crcReader{r: br, h: crc32.New(crcTable)}

	magic := make([]byte, len(snapshotMagic)+2)
	if _, err := io.ReadFull(r, magic); err != nil {
		return invalid("header: %v", err)
	}
	if string(magic[:len(snapshotMagic)]) != snapshotMagic {
		return invalid("not a trendgate cache snapshot")
	}
	if v := magic[len(snapshotMagic)]; v != snapshotVersion {
		return invalid("format version %d, want %d", v, snapshotVersion)
	}
	if v := magic[len(snapshotMagic)+1]; v != schemaVersion {
		return invalid("entry schema version %d, want %d", v, schemaVersion)
	}
	if _, err := binary.ReadVarint(r); err != nil {
		return invalid("header: %v", err)
	}
	var origin [sha256.Size]byte
	if _, err := io.ReadFull(r, origin[:]); err != nil {
		return invalid("header: %v", err)
	}
	if err := r.checkSum(); err != nil {
		return invalid("header: %v", err)
	}
	if origin != sha256.Sum256([]byte(opts.Origin)) {
		return invalid("written for another upstream, or before a cluster purge")
	}

	var (
		kept    []*Entry
		seen    = make(map[string]struct{})
		records int
		used    int64 // bytes of the records kept so far
	)
	for {
		tag, err := r.ReadByte()
		if err != nil {
			return invalid("truncated after %d records (no trailer)", records)
		}
		switch tag {
		case tagEntry:
			n, err := binary.ReadUvarint(r)
			if err != nil || n > uint64(size) {
				return invalid("record %d: bad length", records)
			}
			r.h.Reset() // the record's checksum covers its entry bytes only
			body := make([]byte, n)
			if _, err := io.ReadFull(r, body); err != nil {
				return invalid("record %d: truncated", records)
			}
			if err := r.checkSum(); err != nil {
				return invalid("record %d: %v", records, err)
			}
			e, err := decodeEntry(body)
			if err != nil {
				return invalid("record %d: %v", records, err)
			}
			records++
			if reason := admissible(e, opts); reason != "" {
				stats.drop(reason)
				continue
			}
			if _, dup := seen[e.Key]; dup {
				stats.drop(DropDuplicate)
				continue
			}
			recLen := int64(1+uvarintLen(n)+crcLen) + int64(n)
			if used+recLen > opts.MaxBytes {
				stats.drop(DropBound)
				continue
			}
			used += recLen
			seen[e.Key] = struct{}{}
			kept = append(kept, e)
		case tagTrailer:
			count, err := binary.ReadUvarint(r)
			if err != nil {
				return invalid("trailer: %v", err)
			}
			if err := r.checkSum(); err != nil {
				return invalid("trailer: %v", err)
			}
			if count != uint64(records) {
				return invalid("trailer counts %d records, file has %d", count, records)
			}
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				return invalid("bytes after the trailer")
			}
			return kept, stats, nil
		default:
			return invalid("record %d: unknown tag %#x", records, tag)
		}
	}
}

// admissible returns why e may not be loaded, or "" if it may. It sets
// e.FreshUntil anew (see SnapshotOptions.Revalidate): e is not shared yet.
func admissible(e *Entry, opts SnapshotOptions) string {
	parse := opts.ParseKey
	if parse == nil {
		parse = api.ParseKey
	}
	q, err := parse(e.Key, opts.Now)
	switch {
	case err != nil || q.Topic != e.Topic:
		return DropKey
	case e.Status != 200 && e.Status != 404:
		return DropStatus
	case e.Fetched.IsZero() || e.Fetched.After(opts.Now):
		return DropFetched
	}
	e.FreshUntil = e.Fetched
	if opts.Revalidate != nil {
		fresh, err := opts.Revalidate(e, q)
		if err != nil {
			return DropInvalid
		}
		e.FreshUntil = fresh
	}
	if !opts.Now.Before(e.FreshUntil.Add(opts.MaxStale)) {
		return DropExpired
	}
	return ""
}

// checkMAC reads the whole file f of size bytes and checks that its last
// sha256.Size bytes are the HMAC-SHA256 under key of those before them; it
// leaves f at its start for the parse.
func checkMAC(f *os.File, size int64, key []byte) error {
	if size < sha256.Size {
		return errors.New("not authenticated (no HMAC)")
	}
	mac := hmac.New(sha256.New, key)
	if _, err := io.Copy(mac, io.LimitReader(f, size-sha256.Size)); err != nil {
		return err
	}
	var got [sha256.Size]byte
	if _, err := io.ReadFull(f, got[:]); err != nil {
		return err
	}
	if !hmac.Equal(got[:], mac.Sum(nil)) {
		return errors.New("HMAC mismatch: not written with this key, or edited")
	}
	_, err := f.Seek(0, io.SeekStart)
	return err
}

func uvarintLen(n uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], n)
}

// crcReader feeds every byte read through it to h, so a section's checksum
// can be compared with the 4 bytes that follow it (checkSum).
type crcReader struct {
	r *bufio.Reader
	h hash.Hash32
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	return n, err
}

func (c *crcReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.h.Write([]byte{b})
	}
	return b, err
}

// checkSum reads the 4-byte checksum that ends a section, compares it with
// what was read since the last reset, and starts the next section.
func (c *crcReader) checkSum() error {
	want := c.h.Sum32()
	var got [crcLen]byte
	if _, err := io.ReadFull(c.r, got[:]); err != nil {
		return fmt.Errorf("checksum: %w", err)
	}
	c.h.Reset()
	if binary.BigEndian.Uint32(got[:]) != want {
		return errors.New("checksum mismatch")
	}
	return nil
}

// entries returns the entries l holds now (in no particular order).
func (l *Local) entries() []*Entry {
	l.mu.Lock()
	keys := make([]string, 0, len(l.keys))
	for k := range l.keys {
		keys = append(keys, k)
	}
	l.mu.Unlock()
	ctx := context.Background()
	out := make([]*Entry, 0, len(keys))
	for _, k := range keys {
		if e, ok := l.Get(ctx, k); ok {
			out = append(out, e)
		}
	}
	return out
}

// CheckPersistPath reports why a snapshot could not be written at path:
// its directory missing, not a directory or not writable (found by
// creating and removing a temporary file there), or path itself a
// directory. nil means a save should succeed, space permitting.
func CheckPersistPath(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("cache: %s is a directory", path)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cache: snapshot directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("cache: snapshot directory %s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".trendgate-check-*")
	if err != nil {
		return fmt.Errorf("cache: snapshot directory not writable: %w", err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}
