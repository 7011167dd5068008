package rollup

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"

	"trendgate/internal/atomicfile"
)

// The rollups file, beside the state file and separate from it:
//
//	file    = magic record*
//	magic   = "TGUSAGE1"
//	record  = uvarint(len(payload)) crc32c(payload), 4 bytes little-endian, payload
//	payload = op*
//	op      = 1 uvarint(len) bytes              define the next string id (0, 1, ...)
//	        | 2 uvarint(days since 1970-01-01)  the day of the rows that follow
//	        | 3 uvarint(account id) uvarint(key id) uvarint(units)
//	            uvarint(upstream calls) uvarint(bytes) uvarint(cells)
//	            { uvarint(route id) byte(class) uvarint(requests) }*cells
//
// A record is one Flush: the rows are deltas, added to what the same key's
// day already holds. String ids are defined once per file (a key id, an
// account, a route) and stay defined for the records after, so a key-day
// costs its numbers and a few bytes of ids. A record whose length, checksum
// or content is wrong, and everything after it, is a torn tail: dropped at
// start. Compaction rewrites the file whole from memory, one row per
// key-day.

const fileMagic = "TGUSAGE1"

// Ops of a record's payload.
const (
	opString = 1
	opDay    = 2
	opRow    = 3
)

// maxRecord bounds one record's payload when reading; a length above it
// is damage.
const maxRecord = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var errDamaged = errors.New("damaged record")

// fileWriter appends records to an open rollups file.
type fileWriter struct {
	f    *os.File
	strs map[string]uint64 // the file's string ids
	size int64             // bytes in the file
	base int64             // size right after the last compaction
	// broken is set when an append failed part-way: the file must be
	// rewritten whole before anything more is appended.
	broken bool
}

// readResult is what readFile found.
type readResult struct {
	good, dropped int64 // bytes kept and dropped (a torn tail)
	writer        *fileWriter
}

// readFile adds every complete record of the file at path to t. A missing
// file is an empty one. It stops at the first damaged record and reports
// how many bytes follow it.
func readFile(path string, t table) (readResult, error) {
	var res readResult
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("rollup: open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return res, fmt.Errorf("rollup: %s: %w", path, err)
	}
	br := bufio.NewReaderSize(f, 1<<16)
	var magic [len(fileMagic)]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil || string(magic[:]) != fileMagic {
		if st.Size() == 0 {
			return res, nil
		}
		if err == nil {
			return res, fmt.Errorf("rollup: %s is not a usage rollups file", path)
		}
		res.dropped = st.Size() // a torn header: nothing was written after it
		return res, nil
	}
	res.good = int64(len(fileMagic))
	var strs []string
	var buf []byte
	for {
		n, err := binary.ReadUvarint(br)
		if err != nil || n > maxRecord {
			break
		}
		var sum [4]byte
		if _, err := io.ReadFull(br, sum[:]); err != nil {
			break
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			break
		}
		if crc32.Checksum(buf, castagnoli) != binary.LittleEndian.Uint32(sum[:]) {
			break
		}
		// Decode into a scratch table first: a record is applied whole or
		// not at all.
		scratch := newTable()
		ns, err := decodeRecord(buf, strs, scratch)
		if err != nil {
			break
		}
		strs = ns
		for k, r := range scratch.rows {
			t.merge(k, r)
		}
		res.good += int64(uvarintLen(n)) + 4 + int64(n)
	}
	res.dropped = st.Size() - res.good
	return res, nil
}

// decodeRecord applies one payload's rows to t, defining strings on the
// way, and returns the string table after it.
func decodeRecord(p []byte, strs []string, t table) ([]string, error) {
	var day Date
	next := func() (uint64, error) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, errDamaged
		}
		p = p[n:]
		return v, nil
	}
	str := func() (string, error) {
		id, err := next()
		if err != nil || id >= uint64(len(strs)) {
			return "", errDamaged
		}
		return strs[id], nil
	}
	for len(p) > 0 {
		op := p[0]
		p = p[1:]
		switch op {
		case opString:
			n, err := next()
			if err != nil || n > uint64(len(p)) {
				return nil, errDamaged
			}
			strs = append(strs, string(p[:n]))
			p = p[n:]
		case opDay:
			d, err := next()
			if err != nil || d > 1<<20 {
				return nil, errDamaged
			}
			day = dateFromEpochDays(int64(d))
		case opRow:
			if day == 0 {
				return nil, errDamaged
			}
			var k rowKey
			var r row
			var err error
			k.day = day
			if k.account, err = str(); err != nil {
				return nil, err
			}
			if k.key, err = str(); err != nil {
				return nil, err
			}
			var v [4]uint64
			for i := range v {
				if v[i], err = next(); err != nil {
					return nil, err
				}
			}
			r.units, r.upstream, r.bytes = int64(v[0]), int64(v[1]), int64(v[2])
			if v[3] > uint64(len(p)) {
				return nil, errDamaged
			}
			for range v[3] {
				route, err := str()
				if err != nil || len(p) == 0 || p[0] >= byte(numClasses) {
					return nil, errDamaged
				}
				c := Class(p[0])
				p = p[1:]
				n, err := next()
				if err != nil {
					return nil, err
				}
				r.reqs = append(r.reqs, Cell{Route: route, Class: c, Requests: int64(n)})
			}
			t.merge(k, &r)
		default:
			return nil, errDamaged
		}
	}
	return strs, nil
}

// encodeRows appends rows (sorted by day, then account and key) as one
// payload, defining in strs the strings it uses first.
func encodeRows(b []byte, rows map[rowKey]*row, strs map[string]uint64) []byte {
	keys := sortedKeys(rows)
	id := func(s string) uint64 {
		v, ok := strs[s]
		if !ok {
			v = uint64(len(strs))
			strs[s] = v
			b = append(b, opString)
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		return v
	}
	var day Date
	for _, k := range keys {
		r := rows[k]
		if k.day != day {
			day = k.day
			b = append(b, opDay)
			b = binary.AppendUvarint(b, uint64(day.epochDays()))
		}
		// Ids first: their definitions must precede the row.
		acct, key := id(k.account), id(k.key)
		routes := make([]uint64, len(r.reqs))
		for i, c := range r.reqs {
			routes[i] = id(c.Route)
		}
		b = append(b, opRow)
		b = binary.AppendUvarint(b, acct)
		b = binary.AppendUvarint(b, key)
		b = binary.AppendUvarint(b, uint64(r.units))
		b = binary.AppendUvarint(b, uint64(r.upstream))
		b = binary.AppendUvarint(b, uint64(r.bytes))
		b = binary.AppendUvarint(b, uint64(len(r.reqs)))
		for i, c := range r.reqs {
			b = binary.AppendUvarint(b, routes[i])
			b = append(b, byte(c.Class))
			b = binary.AppendUvarint(b, uint64(c.Requests))
		}
	}
	return b
}

// frame appends payload p to b as a record.
func frame(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(p, castagnoli))
	return append(b, p...)
}

// append writes rows as one record and syncs the file.
func (w *fileWriter) append(rows map[rowKey]*row) error {
	if w.broken {
		return errors.New("a previous write failed")
	}
	before := len(w.strs)
	p := encodeRows(nil, rows, w.strs)
	rec := frame(make([]byte, 0, len(p)+9), p)
	n, err := w.f.Write(rec)
	w.size += int64(n)
	if err == nil {
		err = w.f.Sync()
	}
	if err != nil {
		// Strings the failed record defined are not defined in the file.
		w.broken = true
		for s, id := range w.strs {
			if id >= uint64(before) {
				delete(w.strs, s)
			}
		}
	}
	return err
}

// encodeFile returns rows as a whole file, one row per key-day, and the
// string ids it defines.
func encodeFile(rows map[rowKey]*row) ([]byte, map[string]uint64) {
	strs := make(map[string]uint64)
	b := []byte(fileMagic)
	// One record per 4,096 rows keeps each record's size reasonable
	// for the reader.
	chunk := make(map[rowKey]*row, 4096)
	flush := func() {
		if len(chunk) > 0 {
			b = frame(b, encodeRows(nil, chunk, strs))
			clear(chunk)
		}
	}
	for _, k := range sortedKeys(rows) {
		chunk[k] = rows[k]
		if len(chunk) == 4096 {
			flush()
		}
	}
	flush()
	return b, strs
}

// installFile writes b (see encodeFile) as a fresh file replacing path
// (atomically) and opens it for appending; old, when not nil, is closed.
func installFile(path string, old *fileWriter, b []byte, strs map[string]uint64) (*fileWriter, error) {
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return old, err
	}
	if old != nil {
		_ = old.f.Close()
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &fileWriter{f: f, strs: strs, size: int64(len(b)), base: int64(len(b))}, nil
}

func sortedKeys(rows map[rowKey]*row) []rowKey {
	keys := make([]rowKey, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, c := keys[i], keys[j]
		if a.day != c.day {
			return a.day < c.day
		}
		if a.account != c.account {
			return a.account < c.account
		}
		return a.key < c.key
	})
	return keys
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
