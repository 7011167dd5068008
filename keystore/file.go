package keystore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"trendgate/internal/atomicfile"
)

// The keys file is a log: a snapshot of the Doc, then one record per edit
// since, each on a line of its own as "<crc> <json>", where crc is the
// CRC-32C of the JSON in 8 hex digits and the JSON is {"snapshot": Doc}
// or {"patch": Patch}. An edit appends its record and syncs the file,
// which costs the same with 100 keys as with 100,000; every compactEvery
// records the file is written again whole (atomically), as one snapshot.
// A crash while appending leaves a last line cut short: it fails its
// check and is left out (the edit it held was never answered as done),
// and the next write is a whole one. Files written as one YAML document
// (before the log) are read as a snapshot and turned into a log at the
// next edit.

// compactEvery is how many records the keys file holds after its snapshot
// before it is written again whole.
const compactEvery = 1000

// fileHeader starts every keys file.
const fileHeader = "# trendgate keys file: the keys and account changes made through the admin key API.\n" +
	"# Written by trendgate (docs/accounts.md); change it through the API or `trendgate keys`.\n" +
	"# Each line after these is \"<crc32c> <json>\": a snapshot, then one record per change.\n"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// record is one line of the keys file.
type record struct {
	Snapshot *Doc   `json:"snapshot,omitempty"`
	Patch    *Patch `json:"patch,omitempty"`
}

// file is the keys file as this Store last read or wrote it.
type file struct {
	path    string
	version int64 // the version of the Doc it holds
	records int   // records after its snapshot
	torn    bool  // its last line was cut short
	whole   bool  // missing, one YAML document, or torn: write it whole next
	size    int64 // size and modification time once read or written,
	mtime   time.Time
}

// Load reads the keys file at path; a missing file is an empty Doc.
func Load(path string) (*Doc, error) {
	_, d, err := openFile(path)
	return d, err
}

// openFile reads the keys file at path.
func openFile(path string) (*file, *Doc, error) {
	f := &file{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		f.whole = true
		return f, &Doc{}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("keys_file: %w", err)
	}
	d, err := f.parse(b)
	if err != nil {
		return nil, nil, fmt.Errorf("keys_file %s: %w", path, err)
	}
	f.version = d.Version
	f.stat()
	return f, d, nil
}

// parse reads the content b of the keys file.
func (f *file) parse(b []byte) (*Doc, error) {
	body := b
	for len(body) > 0 && (body[0] == '#' || body[0] == '\n') {
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			body = body[i+1:]
		} else {
			body = nil
		}
	}
	if len(body) > 0 && !isRecordLine(body) {
		f.whole = true
		d, err := decodeYAML(body)
		return d, err
	}
	d := &Doc{}
	patches := 0
	// The records are replayed on one Doc, indexed as they go: a log of
	// 100,000 records reads in one pass.
	r := newReplay(d)
	for n := 1; len(body) > 0; n++ {
		line, rest, complete := bytes.Cut(body, []byte{'\n'})
		body = rest
		rec, err := decodeRecord(line)
		if err != nil || !complete {
			if len(bytes.TrimSpace(body)) == 0 {
				f.torn, f.whole = true, true // the last line: an append cut short
				break
			}
			if err == nil {
				err = errors.New("no line end")
			}
			return nil, fmt.Errorf("record %d: %w", n, err)
		}
		switch {
		case rec.Snapshot != nil:
			d = rec.Snapshot
			r = newReplay(d)
			patches = 0
		case rec.Patch != nil:
			if rec.Patch.Version != d.Version+1 {
				return nil, fmt.Errorf("record %d: version %d after version %d", n, rec.Patch.Version, d.Version)
			}
			r.apply(rec.Patch)
			patches++
		}
	}
	f.records = patches
	return d, nil
}

// isRecordLine reports whether b starts with "<8 hex digits> {".
func isRecordLine(b []byte) bool {
	if len(b) < 10 || b[8] != ' ' || b[9] != '{' {
		return false
	}
	_, err := strconv.ParseUint(string(b[:8]), 16, 32)
	return err == nil
}

// decodeRecord checks and decodes one line of the keys file.
func decodeRecord(line []byte) (*record, error) {
	if !isRecordLine(line) {
		return nil, errors.New("not a record")
	}
	want, _ := strconv.ParseUint(string(line[:8]), 16, 32)
	body := line[9:]
	if crc32.Checksum(body, crcTable) != uint32(want) {
		return nil, errors.New("checksum mismatch")
	}
	rec := &record{}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(rec); err != nil {
		return nil, err
	}
	if (rec.Snapshot == nil) == (rec.Patch == nil) {
		return nil, errors.New("a record holds a snapshot or a patch")
	}
	return rec, nil
}

// line is rec as a line of the keys file.
func line(rec record) ([]byte, error) {
	body, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)+10)
	out = fmt.Appendf(out, "%08x ", crc32.Checksum(body, crcTable))
	out = append(out, body...)
	return append(out, '\n'), nil
}

// append adds ps to the file and syncs it.
func (f *file) append(ps []*Patch) (err error) {
	var buf []byte
	for _, p := range ps {
		l, err := line(record{Patch: p})
		if err != nil {
			return err
		}
		buf = append(buf, l...)
	}
	fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("keys_file: %w", err)
	}
	defer func() {
		if cerr := fh.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("keys_file: %w", cerr)
		}
		if err != nil {
			f.whole = true // part of a line may be there
		}
	}()
	if _, err := fh.Write(buf); err != nil {
		return fmt.Errorf("keys_file: %w", err)
	}
	if err := fh.Sync(); err != nil {
		return fmt.Errorf("keys_file: %w", err)
	}
	f.version = ps[len(ps)-1].Version
	f.records += len(ps)
	f.stat()
	return nil
}

// snapshot writes the file again whole, as d alone, atomically.
func (f *file) snapshot(d *Doc) error {
	if err := Save(f.path, d); err != nil {
		return err
	}
	f.version, f.records, f.torn, f.whole = d.Version, 0, false, false
	f.stat()
	return nil
}

// stat notes the file's size and modification time.
func (f *file) stat() {
	if fi, err := os.Stat(f.path); err == nil {
		f.size, f.mtime = fi.Size(), fi.ModTime()
	}
}

// changed reports whether the file is not as this Store last read or
// wrote it (an operator edited it).
func (f *file) changed() bool {
	fi, err := os.Stat(f.path)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) || f.size != 0
	}
	return fi.Size() != f.size || !fi.ModTime().Equal(f.mtime)
}

// Save writes d to the keys file at path atomically, mode 0600, as a
// snapshot alone.
func Save(path string, d *Doc) error {
	l, err := line(record{Snapshot: d})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append([]byte(fileHeader), l...), 0o600); err != nil {
		return fmt.Errorf("keys_file: %w", err)
	}
	return nil
}

func jsonEncode(d *Doc) ([]byte, error) { return json.Marshal(d) }

// decodeDoc parses a Doc strictly (an unknown field is an error): JSON,
// or the YAML of files and Redis copies written before the log.
func decodeDoc(b []byte) (*Doc, error) {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		d := &Doc{}
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.DisallowUnknownFields()
		if err := dec.Decode(d); err != nil {
			return nil, err
		}
		return d, nil
	}
	return decodeYAML(b)
}

func decodeYAML(b []byte) (*Doc, error) {
	d := &Doc{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(d); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return d, nil
}

// replay applies patches to one Doc in place, with indexes, so that a
// long log reads in time linear in its length (Doc.with copies).
type replay struct {
	d        *Doc
	keys     map[string]int
	changes  map[[2]string]int
	accounts map[string]int
}

func newReplay(d *Doc) *replay {
	r := &replay{d: d, keys: map[string]int{}, changes: map[[2]string]int{}, accounts: map[string]int{}}
	for i, k := range d.Keys {
		r.keys[k.ID] = i
	}
	for i, ch := range d.ConfigKeys {
		r.changes[[2]string{ch.ID, ch.SHA256}] = i
	}
	for i, a := range d.Accounts {
		r.accounts[a.ID] = i
	}
	return r
}

// apply is Doc.with in place.
func (r *replay) apply(p *Patch) {
	d := r.d
	d.Version = p.Version
	for _, k := range p.Keys {
		if i, ok := r.keys[k.ID]; ok {
			d.Keys[i] = k
		} else {
			r.keys[k.ID] = len(d.Keys)
			d.Keys = append(d.Keys, k)
		}
	}
	for _, ch := range p.ConfigKeys {
		id := [2]string{ch.ID, ch.SHA256}
		if i, ok := r.changes[id]; ok {
			d.ConfigKeys[i] = ch
		} else {
			r.changes[id] = len(d.ConfigKeys)
			d.ConfigKeys = append(d.ConfigKeys, ch)
		}
	}
	for _, a := range p.Accounts {
		if i, ok := r.accounts[a.ID]; ok {
			d.Accounts[i] = a
		} else {
			r.accounts[a.ID] = len(d.Accounts)
			d.Accounts = append(d.Accounts, a)
		}
	}
}
