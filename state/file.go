package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"trendgate/activity"
	"trendgate/api"
	"trendgate/internal/atomicfile"
	"trendgate/limits"
)

// The file (format version 2) is a journal:
//
//	header   "tgstate" and the format version (1 byte)
//	records  each: length of kind and payload (4 bytes, big-endian), kind
//	         (1 byte), payload, CRC-32C of the length, kind and payload (4
//	         bytes, big-endian)
//
// The first record is a snapshot (kind 1): everything. Every later record
// is a change (kind 2): the accounts and keys that changed since the
// record before, each replacing what the file held for it (an upsert), so
// replaying a record twice changes nothing. Both kinds share one payload
// layout: written at (varint, unix ns); counters: count (uvarint), each
// subject (uvarint length, bytes), day, day used, month, month used
// (uvarints); usage: count (uvarint), each key id (uvarint length, bytes),
// last seen (varint unix ns, 0 for never), cells (count, then hour,
// endpoint, class, requests, units as uvarints), hours (count, then hour,
// upstream, abandoned).
//
// A last record cut short or failing its checksum is a write a crash
// interrupted: it is dropped (Info.Torn) and the state is that of the
// records before it. Any other damage (header, first record, a record with
// more after it) makes the whole file damaged (ErrDamaged).
//
// Format version 1, the whole-file format of earlier releases (header,
// payload length in 8 bytes, one payload, CRC-32C of all before it), is
// still read; the gateway replaces it with a version 2 file by its first
// write.
const (
	magic       = "tgstate"
	versionOne  = 1
	version     = 2
	headerLen   = len(magic) + 1
	v1HeaderLen = headerLen + 8
	sumLen      = 4
	lenLen      = 4
	maxPayload  = 1 << 30

	kindSnapshot byte = 1
	kindChanges  byte = 2
)

// FormatVersion is the format version a Store writes.
const FormatVersion = version

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrDamaged is wrapped by Load's error for a file that is not an intact
// state file: corrupted, truncated inside its first record, or foreign.
// Nothing of such a file is used.
var ErrDamaged = errors.New("state: damaged state file")

// Snapshot is everything a state file holds. The zero value is an empty
// state.
type Snapshot struct {
	// Written is when the latest record was written.
	Written time.Time
	// Counters are the limiter's quota counters, one per account, by
	// subject; accounts at zero in both windows are left out.
	Counters []limits.Counter
	// Usage holds each key's 24-hour usage and last-seen time, by key id.
	Usage map[string]activity.KeyRecord
}

// Info says how a state file was read.
type Info struct {
	// Version is the file's format version.
	Version int
	// Records counts the records read: the snapshot and the changes after
	// it (1 for a version 1 file).
	Records int
	// Torn is the size of a last record a crash cut short, dropped; 0
	// when there was none.
	Torn int
	// Bytes is the file's size.
	Bytes int
}

// Load reads the state file at path. A missing file is an error wrapping
// fs.ErrNotExist; a damaged one (see ErrDamaged) an error wrapping
// ErrDamaged that says what is wrong.
func Load(path string) (Snapshot, error) {
	s, _, err := LoadInfo(path)
	return s, err
}

// LoadInfo is Load, also saying how the file was read.
func LoadInfo(path string) (Snapshot, Info, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Snapshot{}, Info{}, fmt.Errorf("state: %w", err)
	}
	s, info, err := decode(b)
	if err != nil {
		return Snapshot{}, Info{}, fmt.Errorf("%w %s: %v", ErrDamaged, path, err)
	}
	return s, info, nil
}

// write replaces the file at path whole with a file holding s as its
// snapshot record (see the package comment), mode 0600, and returns its
// size. A failed write leaves the previous file as it was.
func write(path string, s Snapshot) (n int, err error) {
	b := encode(s)
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return 0, fmt.Errorf("state: write: %w", err)
	}
	return len(b), nil
}

// Reset moves the state file at path aside, to path.damaged-<UTC time>, so
// the next start begins from zero while the old file stays for
// inspection. It returns the new name; a missing file is an error wrapping
// fs.ErrNotExist.
func Reset(path string, now time.Time) (string, error) {
	if _, err := os.Lstat(path); err != nil {
		return "", fmt.Errorf("state: reset: %w", err)
	}
	aside := path + ".damaged-" + now.UTC().Format("20060102T150405Z")
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("state: reset: %w", err)
	}
	return aside, nil
}

// encode returns a whole version 2 file holding s as its snapshot.
func encode(s Snapshot) []byte {
	b := append([]byte(magic), version)
	return appendRecord(b, kindSnapshot, s)
}

// appendRecord appends a record of kind holding s to b.
func appendRecord(b []byte, kind byte, s Snapshot) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, kind) // the length, set below
	b = appendPayload(b, s)
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-lenLen))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], crcTable))
}

// appendPayload appends s in the payload layout of the package comment.
func appendPayload(p []byte, s Snapshot) []byte {
	p = binary.AppendVarint(p, s.Written.UnixNano())
	p = binary.AppendUvarint(p, uint64(len(s.Counters)))
	for _, c := range s.Counters {
		p = appendString(p, c.Subject)
		p = binary.AppendUvarint(p, uint64(c.Day))
		p = binary.AppendUvarint(p, uint64(c.DayUsed))
		p = binary.AppendUvarint(p, uint64(c.Month))
		p = binary.AppendUvarint(p, uint64(c.MonthUsed))
	}
	p = binary.AppendUvarint(p, uint64(len(s.Usage)))
	for id, rec := range s.Usage {
		p = appendString(p, id)
		var seen int64
		if !rec.LastSeen.IsZero() {
			seen = rec.LastSeen.UnixNano()
		}
		p = binary.AppendVarint(p, seen)
		p = binary.AppendUvarint(p, uint64(len(rec.Cells)))
		for _, c := range rec.Cells {
			for _, v := range [...]uint64{c.Hour, uint64(c.Endpoint), uint64(c.Class), c.Requests, c.Units} {
				p = binary.AppendUvarint(p, v)
			}
		}
		p = binary.AppendUvarint(p, uint64(len(rec.Hours)))
		for _, h := range rec.Hours {
			for _, v := range [...]uint64{h.Hour, h.Upstream, h.Abandon} {
				p = binary.AppendUvarint(p, v)
			}
		}
	}
	return p
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decode reads a state file of either version, checking each record's
// framing and checksum before reading a single counter from it.
func decode(b []byte) (Snapshot, Info, error) {
	if len(b) < headerLen || string(b[:len(magic)]) != magic {
		return Snapshot{}, Info{}, errors.New("not a trendgate state file")
	}
	switch v := b[len(magic)]; v {
	case versionOne:
		s, err := decodeOne(b)
		return s, Info{Version: versionOne, Records: 1, Bytes: len(b)}, err
	case version:
		return replay(b)
	default:
		return Snapshot{}, Info{}, fmt.Errorf("format version %d, want %d", v, version)
	}
}

// replay reads a version 2 file: its snapshot, then each change over it.
func replay(b []byte) (Snapshot, Info, error) {
	info := Info{Version: version, Bytes: len(b)}
	var written time.Time
	counters := map[string]limits.Counter{}
	usage := map[string]activity.KeyRecord{}
	for off := headerLen; off < len(b); {
		kind, payload, size, err := readRecord(b[off:])
		if errors.Is(err, errTorn) && info.Records > 0 {
			info.Torn = len(b) - off
			break
		}
		if err != nil {
			return Snapshot{}, Info{}, fmt.Errorf("record %d at byte %d: %w", info.Records+1, off, err)
		}
		want := kindChanges
		if info.Records == 0 {
			want = kindSnapshot
		}
		if kind != want {
			return Snapshot{}, Info{}, fmt.Errorf("record %d at byte %d: kind %d, want %d", info.Records+1, off, kind, want)
		}
		rec, err := decodePayload(payload)
		if err != nil {
			return Snapshot{}, Info{}, fmt.Errorf("record %d at byte %d: %w", info.Records+1, off, err)
		}
		written = rec.Written
		for _, c := range rec.Counters {
			counters[c.Subject] = c
		}
		maps.Copy(usage, rec.Usage)
		info.Records++
		off += size
	}
	if info.Records == 0 {
		return Snapshot{}, Info{}, errors.New("no snapshot record")
	}
	s := Snapshot{Written: written, Usage: usage, Counters: make([]limits.Counter, 0, len(counters))}
	for _, c := range counters {
		if c.DayUsed != 0 || c.MonthUsed != 0 {
			s.Counters = append(s.Counters, c)
		}
	}
	slices.SortFunc(s.Counters, func(a, b limits.Counter) int { return strings.Compare(a.Subject, b.Subject) })
	return s, info, nil
}

// errTorn is readRecord's error for a record that a crash may have
// interrupted: cut short by the end of the file, or failing its checksum
// with nothing after it.
var errTorn = errors.New("cut short by the end of the file")

// readRecord reads the record at the start of b and returns its kind,
// payload and size.
func readRecord(b []byte) (kind byte, payload []byte, size int, err error) {
	if len(b) < lenLen+1+sumLen {
		return 0, nil, 0, errTorn
	}
	n := uint64(binary.BigEndian.Uint32(b))
	if n == 0 || n > maxPayload {
		if allZero(b) { // space a write extended the file by, never filled
			return 0, nil, 0, errTorn
		}
		return 0, nil, 0, fmt.Errorf("length %d out of range", n)
	}
	end := lenLen + n + sumLen
	if end > uint64(len(b)) {
		return 0, nil, 0, errTorn
	}
	body := b[:lenLen+n]
	if got, want := binary.BigEndian.Uint32(b[len(body):]), crc32.Checksum(body, crcTable); got != want {
		if end == uint64(len(b)) {
			return 0, nil, 0, fmt.Errorf("%w (checksum mismatch)", errTorn)
		}
		return 0, nil, 0, errors.New("checksum mismatch")
	}
	return body[lenLen], body[lenLen+1:], int(end), nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// decodeOne reads a version 1 file: one payload, its length in the header
// and a CRC-32C of everything before it at the end.
func decodeOne(b []byte) (Snapshot, error) {
	if len(b) < v1HeaderLen {
		return Snapshot{}, errors.New("truncated header")
	}
	n := binary.BigEndian.Uint64(b[headerLen:v1HeaderLen])
	if want := uint64(v1HeaderLen) + n + sumLen; n > maxPayload || uint64(len(b)) != want {
		return Snapshot{}, fmt.Errorf("truncated or extended: %d bytes, the header says %d", len(b), want)
	}
	body := b[:len(b)-sumLen]
	if got, want := binary.BigEndian.Uint32(b[len(body):]), crc32.Checksum(body, crcTable); got != want {
		return Snapshot{}, errors.New("checksum mismatch")
	}
	return decodePayload(body[v1HeaderLen:])
}

// decodePayload reads one payload of the layout in the package comment;
// every byte must belong to it.
func decodePayload(p []byte) (Snapshot, error) {
	r := reader{r: bytes.NewReader(p)}
	s := Snapshot{Written: time.Unix(0, r.varint())}
	s.Counters = make([]limits.Counter, r.count())
	for i := range s.Counters {
		s.Counters[i] = limits.Counter{
			Subject: r.string(), Day: r.int(), DayUsed: int64(r.int()), Month: r.int(), MonthUsed: int64(r.int()),
		}
	}
	nUsage := r.count()
	s.Usage = make(map[string]activity.KeyRecord, nUsage)
	for range nUsage {
		id := r.string()
		var rec activity.KeyRecord
		if ns := r.varint(); ns != 0 {
			rec.LastSeen = time.Unix(0, ns).UTC()
		}
		rec.Cells = make([]activity.Cell, r.count())
		for i := range rec.Cells {
			rec.Cells[i] = activity.Cell{Hour: r.uvarint(), Endpoint: api.Endpoint(r.int()), Class: activity.StatusClass(r.int()), Requests: r.uvarint(), Units: r.uvarint()}
		}
		rec.Hours = make([]activity.HourCount, r.count())
		for i := range rec.Hours {
			rec.Hours[i] = activity.HourCount{Hour: r.uvarint(), Upstream: r.uvarint(), Abandon: r.uvarint()}
		}
		s.Usage[id] = rec
	}
	if r.err != nil {
		return Snapshot{}, fmt.Errorf("payload: %w", r.err)
	}
	if r.r.Len() != 0 {
		return Snapshot{}, fmt.Errorf("payload: %d bytes past its end", r.r.Len())
	}
	return s, nil
}

// reader decodes the payload, keeping its first error; after one, every
// read returns zero.
type reader struct {
	r   *bytes.Reader
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(r.r)
	if err != nil {
		r.err = unexpected(err)
	}
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(r.r)
	if err != nil {
		r.err = unexpected(err)
	}
	return v
}

// int reads a uvarint that must fit an int64.
func (r *reader) int() int {
	v := r.uvarint()
	if v > 1<<62 && r.err == nil {
		r.err = fmt.Errorf("value %d out of range", v)
	}
	return int(v)
}

// count reads a number of items, each at least one byte long, so it can
// be no larger than what is left to read.
func (r *reader) count() int {
	v := r.uvarint()
	if r.err == nil && v > uint64(r.r.Len()) {
		r.err = fmt.Errorf("count %d past the end", v)
	}
	if r.err != nil {
		return 0
	}
	return int(v)
}

func (r *reader) string() string {
	n := r.count()
	if r.err != nil {
		return ""
	}
	b := make([]byte, n)
	_, _ = io.ReadFull(r.r, b) // count made sure the bytes are there
	return string(b)
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// CheckPath reports why a state file could not be written at path: its
// directory missing, not a directory or not writable (found by creating
// and removing a temporary file there), or path itself a directory.
func CheckPath(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".trendgate-check-*")
	if err != nil {
		return fmt.Errorf("directory not writable: %w", err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}
