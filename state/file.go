package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"trendgate/activity"
	"trendgate/api"
	"trendgate/internal/atomicfile"
	"trendgate/limits"
)

// The file:
//
//	magic    "tgstate" and the format version (1 byte)
//	length   of the payload (8 bytes, big-endian)
//	payload  written at (varint, unix ns); counters: count (uvarint), each
//	         subject (uvarint length, bytes), day, day used, month, month
//	         used (uvarints); usage: count (uvarint), each key id (uvarint
//	         length, bytes), last seen (varint unix ns, 0 for never),
//	         cells (count, then hour, endpoint, class, requests, units as
//	         uvarints), hours (count, then hour, upstream, abandoned)
//	checksum CRC-32C of everything before it (4 bytes, big-endian);
//	         nothing may follow
const (
	magic      = "tgstate"
	version    = 1
	headerLen  = len(magic) + 1 + 8
	sumLen     = 4
	maxPayload = 1 << 30
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrDamaged is wrapped by Load's error for a file that is not a complete,
// intact state file of this version: truncated, corrupted or foreign.
// Nothing of such a file is used.
var ErrDamaged = errors.New("state: damaged state file")

// Snapshot is everything a state file holds. The zero value is an empty
// state.
type Snapshot struct {
	// Written is when the file was written.
	Written time.Time
	// Counters are the limiter's quota counters, one per account.
	Counters []limits.Counter
	// Usage holds each key's 24-hour usage and last-seen time, by key id.
	Usage map[string]activity.KeyRecord
}

// Load reads the state file at path. A missing file is an error wrapping
// fs.ErrNotExist; a file that is not whole and intact is an error wrapping
// ErrDamaged that says what is wrong.
func Load(path string) (Snapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Snapshot{}, fmt.Errorf("state: %w", err)
	}
	s, err := decode(b)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w %s: %v", ErrDamaged, path, err)
	}
	return s, nil
}

// write stores s at path atomically (see the package comment), mode 0600.
// A failed write leaves the previous file as it was.
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

func encode(s Snapshot) []byte {
	p := binary.AppendVarint(nil, s.Written.UnixNano())
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
	b := make([]byte, 0, headerLen+len(p)+sumLen)
	b = append(b, magic...)
	b = append(b, version)
	b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
	b = append(b, p...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decode parses a whole state file, checking its framing and checksum
// before reading a single counter.
func decode(b []byte) (Snapshot, error) {
	if len(b) < headerLen || string(b[:len(magic)]) != magic {
		return Snapshot{}, errors.New("not a trendgate state file")
	}
	if v := b[len(magic)]; v != version {
		return Snapshot{}, fmt.Errorf("format version %d, want %d", v, version)
	}
	n := binary.BigEndian.Uint64(b[len(magic)+1 : headerLen])
	if want := uint64(headerLen) + n + sumLen; n > maxPayload || uint64(len(b)) != want {
		return Snapshot{}, fmt.Errorf("truncated or extended: %d bytes, the header says %d", len(b), want)
	}
	body := b[:len(b)-sumLen]
	if got, want := binary.BigEndian.Uint32(b[len(body):]), crc32.Checksum(body, crcTable); got != want {
		return Snapshot{}, errors.New("checksum mismatch")
	}
	r := reader{r: bytes.NewReader(body[headerLen:])}
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
