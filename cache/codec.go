package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// schemaVersion is written in front of every shared-tier entry; entries of
// any other version are misses, so a rolling deploy never decodes a foreign
// layout.
const schemaVersion = 1

// codecMagic starts every encoded entry.
const codecMagic = "tgc"

// ErrInvalidEntry is wrapped by every decoding failure.
var ErrInvalidEntry = errors.New("cache: invalid encoded entry")

// encodeEntry serializes e: magic, schema version, then Key, Topic and
// ContentType (length-prefixed), Status, Generated, Fetched and FreshUntil
// (varints, times as unix nanoseconds with 0 for the zero time) and Body
// (length-prefixed, last).
func encodeEntry(e *Entry) []byte {
	n := len(codecMagic) + 1 + 6*binary.MaxVarintLen64 + len(e.Key) + len(e.Topic) + len(e.ContentType) + len(e.Body)
	b := make([]byte, 0, n)
	b = append(b, codecMagic...)
	b = append(b, schemaVersion)
	for _, s := range []string{e.Key, e.Topic, e.ContentType} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendVarint(b, int64(e.Status))
	b = binary.AppendVarint(b, e.Generated)
	b = binary.AppendVarint(b, unixNano(e.Fetched))
	b = binary.AppendVarint(b, unixNano(e.FreshUntil))
	b = binary.AppendUvarint(b, uint64(len(e.Body)))
	return append(b, e.Body...)
}

// decodeEntry parses what encodeEntry wrote; anything else (other magic or
// version, truncation, trailing bytes) is an error wrapping ErrInvalidEntry.
func decodeEntry(b []byte) (*Entry, error) {
	d := decoder{b: b}
	if len(b) < len(codecMagic)+1 || string(b[:len(codecMagic)]) != codecMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrInvalidEntry)
	}
	if v := b[len(codecMagic)]; v != schemaVersion {
		return nil, fmt.Errorf("%w: schema version %d, want %d", ErrInvalidEntry, v, schemaVersion)
	}
	d.b = b[len(codecMagic)+1:]
	e := &Entry{
		Key:         string(d.bytes()),
		Topic:       string(d.bytes()),
		ContentType: string(d.bytes()),
	}
	status := d.varint()
	e.Generated = d.varint()
	e.Fetched = fromUnixNano(d.varint())
	e.FreshUntil = fromUnixNano(d.varint())
	body := d.bytes()
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrInvalidEntry, len(d.b))
	}
	if status < 100 || status > 599 {
		return nil, fmt.Errorf("%w: status %d", ErrInvalidEntry, status)
	}
	e.Status = int(status)
	e.Body = append([]byte(nil), body...)
	return e, nil
}

// decoder reads fields in order; the first failure sticks in err.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: bad varint", ErrInvalidEntry)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	if d.err != nil {
		return nil
	}
	l, n := binary.Uvarint(d.b)
	if n <= 0 || l > uint64(len(d.b)-n) {
		d.err = fmt.Errorf("%w: bad length", ErrInvalidEntry)
		return nil
	}
	v := d.b[n : n+int(l)]
	d.b = d.b[n+int(l):]
	return v
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
