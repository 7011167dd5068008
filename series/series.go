// Package series answers a time-series request for an absolute window from
// the rows of a wider answer the gateway already holds, and learns from the
// upstream's own answers how it reads a window's bounds.
//
// A cut is the upstream's answer or nothing. Whether a wider answer covers
// a window is decided by that answer's rows and its own "now"
// (config.generated), never by the gateway's clock: the upstream's clock,
// its lag and its gaps are its own. And which buckets a window selects
// depends on how the upstream reads its bounds (is the bucket an end falls
// in, or begins at, selected? the bucket a start falls in?); until a
// Reading knows what a window depends on, a cut is made only where every
// reading gives the same rows.
//
// Series works on bytes and canonical requests only: it never sees a key, a
// plan or a cache entry, and it never calls the upstream.
package series

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"trendgate/api"
)

// Sources lists the requests whose answers may hold narrow's rows at now,
// the narrowest first: the interval windows of narrow's topic and bucket
// that can reach back to narrow's start. It is empty unless narrow is a
// time series over an absolute window.
//
// The reach of each interval is only a hint that spares looking up (in
// cluster mode, fetching from Redis) answers that cannot hold the window;
// whether an answer covers it is decided by Cut, on its rows.
func Sources(narrow api.Request, now time.Time) []api.Request {
	if !Derivable(narrow) {
		return nil
	}
	out := make([]api.Request, 0, len(sourceIntervals))
	for _, iv := range sourceIntervals {
		if iv.days > 0 && narrow.Start < now.Unix()-(iv.days+1)*86400 {
			continue // starts before what this interval reaches back to
		}
		w := narrow
		w.Interval, w.Start, w.End = iv.name, 0, 0
		out = append(out, w)
	}
	return out
}

// sourceIntervals are the interval windows tried as sources, narrowest
// first, with how many days back each reaches (0: no bound). Each starts
// at a UTC midnight about that many days back and runs to the current
// bucket.
var sourceIntervals = []struct {
	name string
	days int64
}{{"1w", 7}, {"1m", 31}, {"3m", 92}, {"6m", 184}, {"1y", 366}, {"all", 0}}

// Derivable reports whether q is a request Cut can answer: a time series
// over an absolute window (with or without an end).
func Derivable(q api.Request) bool {
	return q.Endpoint == api.EndpointSeries && q.Interval == "" && q.Start != 0
}

// Fact is what is known of one way the upstream reads a bound: whether the
// bucket in question is selected. The zero value is Unknown.
type Fact uint8

// The values of a Fact.
const (
	Unknown Fact = iota
	Include
	Exclude
)

// String returns "unknown", "include" or "exclude".
func (f Fact) String() string {
	switch f {
	case Include:
		return "include"
	case Exclude:
		return "exclude"
	}
	return "unknown"
}

// ParseFact is the inverse of Fact.String; anything else is Unknown.
func ParseFact(s string) Fact {
	switch s {
	case "include":
		return Include
	case "exclude":
		return Exclude
	}
	return Unknown
}

// Reading is what is known of how the upstream turns an absolute window's
// bounds into buckets. Only three facts matter for canonical bounds (see
// api.StartBound): a start on a bucket boundary selects the bucket that
// begins there under any reading. The zero value knows nothing.
type Reading struct {
	// StartInside: does a start inside a bucket select that bucket?
	StartInside Fact
	// EndOn: does an end on a bucket boundary select the bucket that
	// begins there?
	EndOn Fact
	// EndInside: does an end inside a bucket select that bucket?
	EndInside Fact
}

// Named returns the reading of a named start rule ("floor": a start
// selects the bucket it falls in; "ceil": only buckets beginning at or
// after it) and end rule ("inclusive": buckets beginning at or before end;
// "exclusive": before end; "floor_exclusive": before end floored to its
// bucket). An empty name leaves its facts unknown; an unknown name is an
// error.
func Named(start, end string) (Reading, error) {
	var r Reading
	switch start {
	case "":
	case "floor":
		r.StartInside = Include
	case "ceil":
		r.StartInside = Exclude
	default:
		return Reading{}, fmt.Errorf("series: start reading %q: want floor or ceil", start)
	}
	switch end {
	case "":
	case "inclusive":
		r.EndOn, r.EndInside = Include, Include
	case "exclusive":
		r.EndOn, r.EndInside = Exclude, Include
	case "floor_exclusive":
		r.EndOn, r.EndInside = Exclude, Exclude
	default:
		return Reading{}, fmt.Errorf("series: end reading %q: want inclusive, exclusive or floor_exclusive", end)
	}
	return r, nil
}

// edges are the buckets whose selection depends on how q's bounds are
// read: the bucket the start falls in (when it is not on a boundary) and
// the bucket the end falls in or begins (none for an open end), each with
// the fact that decides it. ok is false for an absent edge.
type edges struct {
	start, end         int64
	startFact, endFact Fact
	hasStart, hasEnd   bool
}

func edgesOf(q api.Request, r Reading) edges {
	size := q.BucketSeconds()
	var e edges
	if f := floor(q.Start, size); f != q.Start {
		e.start, e.startFact, e.hasStart = f, r.StartInside, true
	}
	if q.End != 0 {
		e.end, e.hasEnd = floor(q.End, size), true
		if e.end == q.End {
			e.endFact = r.EndOn
		} else {
			e.endFact = r.EndInside
		}
	}
	return e
}

// Needs reports whether the buckets q selects depend on a fact r does not
// know, for a window whose edge buckets hold rows.
func (r Reading) Needs(q api.Request) bool {
	if !Derivable(q) {
		return false
	}
	e := edgesOf(q, r)
	if q.End == 0 {
		// The upstream ends the window at its now, inside its current
		// bucket, which holds a row.
		return e.hasStart && e.startFact == Unknown || r.EndInside == Unknown
	}
	return e.hasStart && e.startFact == Unknown || e.hasEnd && e.endFact == Unknown
}

// Errors of Cut.
var (
	// ErrNotCovered means the wider answer's rows do not show that it holds
	// every bucket the window may select: it starts later, or neither a row
	// nor its own now reaches the window's end.
	ErrNotCovered = errors.New("series: window not covered by the wider answer")
	// ErrAmbiguous means the rows the window selects depend on how the
	// upstream reads a bound, which is not known yet.
	ErrAmbiguous = errors.New("series: rows depend on an unknown reading of the window's bounds")
)

// Cut returns the answer to narrow made from wide, the body of an interval
// answer for the same topic and bucket size: the rows narrow selects under
// r, and wide's config with "interval" dropped and "start" and "end" set as
// narrow's upstream query sends them. It reports the number of rows kept.
//
// wide covers narrow when its config's start is at or before the first
// bucket narrow may select, and (for a window with an end) it has a row at
// or past the last bucket narrow may select, or its config.generated (the
// upstream's now when it answered) is past that bucket's end. A bucket
// that began after the upstream's now proves nothing: an answer that has
// no row for it shows only that the upstream had none yet. A window with
// only a start is covered when wide's config.generated is past the
// client's own start (api.Request.ClientStart: before that the upstream
// refused the window), as the upstream ends such a window at its now, in
// the bucket of config.generated or of wide's newest row; its end edge is
// read as an end inside a bucket. Then its rows are what the upstream held for the
// window when it answered; otherwise Cut returns ErrNotCovered. Where an edge bucket holds a row and r does not
// know whether it is selected, Cut returns ErrAmbiguous. A body that is not
// the upstream's series shape, or of another bucket size, is an error.
func Cut(wide []byte, narrow api.Request, r Reading) (body []byte, rows int, err error) {
	if !Derivable(narrow) {
		return nil, 0, errors.New("series: not an absolute-window series request")
	}
	p, err := parse(wide)
	if err != nil {
		return nil, 0, err
	}
	if p.bucket != narrow.Bucket {
		return nil, 0, fmt.Errorf("series: wider answer has bucket %q, want %q", p.bucket, narrow.Bucket)
	}
	size := narrow.BucketSeconds()
	e := edgesOf(narrow, r)
	from := floor(narrow.Start, size) // the first bucket narrow may select
	if e.hasStart && e.startFact == Exclude {
		from += size
	}
	if p.start > from {
		return nil, 0, ErrNotCovered
	}
	if narrow.End == 0 {
		// Only start: the upstream ends the window at its own now, which
		// must be past start (else it refuses the window). That end lies
		// inside the bucket of wide's now, or of its newest row if that is
		// later (generated may lag the rows by a little).
		if !p.hasGenerated || p.generated <= narrow.ClientStart() {
			return nil, 0, ErrNotCovered
		}
		e.end, e.endFact, e.hasEnd = floor(p.generated, size), r.EndInside, true
		if n := len(p.rows); n > 0 && p.rows[n-1].time > e.end {
			e.end = p.rows[n-1].time
			// The upstream's now had reached that bucket, but nothing shows
			// it was past the bucket's first second: an end right on the
			// boundary is read as an end on it.
			if r.EndOn != r.EndInside {
				return nil, 0, ErrNotCovered
			}
		}
	} else if e.hasEnd {
		last := e.end // the last bucket narrow may select
		if e.endFact == Exclude {
			last -= size
		}
		reached := len(p.rows) > 0 && p.rows[len(p.rows)-1].time >= last
		if !reached && (!p.hasGenerated || p.generated < last+size) {
			return nil, 0, ErrNotCovered
		}
	}
	lo, hi, err := e.span(narrow, p)
	if err != nil {
		return nil, 0, err
	}

	// The cut is sized to its own bytes: a one-hour window cut from a
	// year's answer must hold (and be charged for) an hour, not the year.
	need := len(`{"config":{},"data":[]}`) + len(p.trailer) + 2*20 // 20: digits of start or end
	for _, f := range p.config {
		need += len(f.rawName) + 1 + len(f.value) + 1
	}
	for _, row := range p.rows {
		if row.time >= lo && row.time <= hi {
			need += len(row.raw) + 1
		}
	}
	var b bytes.Buffer
	b.Grow(need)
	b.WriteString(`{"config":{`)
	first := true
	for _, f := range p.config {
		var v []byte
		switch f.name {
		case "interval":
			continue
		case "start":
			v = strconv.AppendInt(nil, narrow.Start, 10)
		case "end":
			if narrow.End == 0 {
				v = f.value
			} else {
				v = strconv.AppendInt(nil, narrow.End, 10)
			}
		default:
			v = f.value
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.Write(f.rawName)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteString(`},"data":[`)
	for _, row := range p.rows {
		if row.time < lo || row.time > hi {
			continue
		}
		if rows > 0 {
			b.WriteByte(',')
		}
		b.Write(row.raw)
		rows++
	}
	b.WriteString("]}")
	b.Write(p.trailer)
	if b.Cap() > b.Len()+b.Len()/8+64 {
		return bytes.Clone(b.Bytes()), rows, nil // never hold much more than the cut
	}
	return b.Bytes(), rows, nil
}

// span returns the first and last bucket times narrow selects among p's
// rows, or ErrAmbiguous.
func (e edges) span(narrow api.Request, p *parsed) (lo, hi int64, err error) {
	size := narrow.BucketSeconds()
	lo, hi = narrow.Start, int64(1<<62)
	if e.hasStart {
		lo = e.start + size // the bucket after the one start falls in
		switch e.startFact {
		case Include:
			lo = e.start
		case Unknown:
			if p.has(e.start) {
				return 0, 0, ErrAmbiguous
			}
		}
	}
	if e.hasEnd {
		hi = e.end - size
		switch e.endFact {
		case Include:
			hi = e.end
		case Unknown:
			if p.has(e.end) {
				return 0, 0, ErrAmbiguous
			}
		}
	}
	return lo, hi, nil
}

// Learn returns what answer, the upstream's answer to narrow (as forwarded,
// with narrow's upstream query), shows of how the upstream reads bounds,
// given ref, an interval answer of the same topic and bucket (nil if none).
//
// seen holds proof: a row in an edge bucket of answer shows that bucket is
// selected (Include); a row in ref, in an edge bucket answer leaves out,
// shows it is not (Exclude; rows do not disappear), but only when ref's
// data is older than answer's (its config.generated is earlier): a ref
// generated at the same moment or later may show a bucket, the current one
// or one that appeared late, that the upstream did not yet show when it
// answered, and the cache may hold such a ref (it is read after answer
// arrives, and another request or instance may have stored it meanwhile).
// absent marks (as
// Exclude) the facts whose edge bucket answer leaves out, where the
// upstream had closed that bucket and nothing proves it held a row: no
// proof, since the hour may simply have no data, but agreement with a
// statement that the bucket is not selected. Everything else stays
// Unknown. A body that is not a series answer teaches nothing.
func Learn(narrow api.Request, answer, ref []byte) (seen, absent Reading) {
	if !Derivable(narrow) {
		return
	}
	a, err := parse(answer)
	if err != nil || a.bucket != narrow.Bucket {
		return
	}
	var w *parsed
	if ref != nil {
		if w, err = parse(ref); err != nil || w.bucket != narrow.Bucket {
			w = nil
		}
	}
	size := narrow.BucketSeconds()
	e := edgesOf(narrow, Reading{})
	// A window inside one bucket has one edge bucket for both bounds: a
	// row there shows both select it, its absence does not say which
	// bound left it out.
	shared := e.hasStart && e.hasEnd && e.start == e.end
	judge := func(bucket int64) (proof, agrees Fact) {
		switch {
		case a.has(bucket):
			return Include, Unknown
		case shared:
			return Unknown, Unknown
		case w != nil && w.start <= bucket && w.has(bucket) && w.olderThan(a):
			return Exclude, Unknown
		case len(a.rows) > 0 && a.hasGenerated && bucket+size <= a.generated:
			return Unknown, Exclude
		}
		return Unknown, Unknown
	}
	if e.hasStart {
		seen.StartInside, absent.StartInside = judge(e.start)
	}
	if e.hasEnd {
		f, g := judge(e.end)
		if e.end == narrow.End {
			seen.EndOn, absent.EndOn = f, g
		} else {
			seen.EndInside, absent.EndInside = f, g
		}
	}
	return seen, absent
}

// floor rounds t down to a multiple of size (t > 0).
func floor(t, size int64) int64 { return t - t%size }

// field is one member of the config object, as written.
type field struct {
	name    string
	rawName []byte // the member name as it appears, quotes included
	value   []byte // the value as it appears
}

// row is one element of data with its bucket time.
type row struct {
	time int64
	raw  []byte
}

// parsed is a series answer taken apart.
type parsed struct {
	config       []field
	start        int64
	generated    int64 // config.generated: the upstream's now when it answered
	hasGenerated bool
	bucket       string
	rows         []row
	trailer      []byte // what follows the top-level object (a newline)
}

// olderThan reports whether p's data was generated before q's, by the
// upstream's own clock (config.generated of both). Without both stamps
// nothing orders them.
func (p *parsed) olderThan(q *parsed) bool {
	return p.hasGenerated && q.hasGenerated && p.generated < q.generated
}

// has reports whether p holds a row for the bucket beginning at t.
func (p *parsed) has(t int64) bool {
	i, j := 0, len(p.rows)
	for i < j {
		h := int(uint(i+j) >> 1)
		if p.rows[h].time < t {
			i = h + 1
		} else {
			j = h
		}
	}
	return i < len(p.rows) && p.rows[i].time == t
}

// parse takes apart a series answer: exactly a config object and a data
// array, in that order, each row an object with a numeric time.
func parse(body []byte) (*parsed, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	bad := func(what string) (*parsed, error) {
		return nil, fmt.Errorf("series: not a series answer: %s", what)
	}
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return bad("no top-level object")
	}
	p := &parsed{}
	var seenConfig, seenData bool
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return bad("bad member name")
		}
		name, _ := tok.(string)
		switch {
		case name == "config" && !seenConfig && !seenData:
			seenConfig = true
			if err := p.parseConfig(d, body); err != nil {
				return nil, err
			}
		case name == "data" && seenConfig && !seenData:
			seenData = true
			var raws []json.RawMessage
			if err := d.Decode(&raws); err != nil {
				return bad("data is not an array")
			}
			p.rows = make([]row, len(raws))
			for i, raw := range raws {
				var t struct {
					Time *int64 `json:"time"`
				}
				if json.Unmarshal(raw, &t) != nil || t.Time == nil {
					return bad("a row without a numeric time")
				}
				if i > 0 && *t.Time <= p.rows[i-1].time {
					return bad("rows not in ascending time")
				}
				p.rows[i] = row{time: *t.Time, raw: raw}
			}
		default:
			return bad("unexpected member " + strconv.Quote(name))
		}
	}
	if _, err := d.Token(); err != nil || !seenData {
		return bad("incomplete object")
	}
	rest := body[d.InputOffset():]
	if len(bytes.TrimSpace(rest)) != 0 {
		return bad("trailing data")
	}
	p.trailer = rest
	return p, nil
}

// parseConfig reads the config object member by member, keeping each
// name and value exactly as written.
func (p *parsed) parseConfig(d *json.Decoder, body []byte) error {
	bad := func(what string) error { return fmt.Errorf("series: bad config: %s", what) }
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return bad("not an object")
	}
	var haveStart, haveBucket bool
	for d.More() {
		before := d.InputOffset()
		tok, err := d.Token()
		if err != nil {
			return bad("bad member name")
		}
		name, _ := tok.(string)
		rawName := bytes.TrimLeft(body[before:d.InputOffset()], ", \t\r\n")
		var value json.RawMessage
		if err := d.Decode(&value); err != nil {
			return bad("bad value of " + strconv.Quote(name))
		}
		switch name {
		case "start":
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil {
				return bad("start is not an integer")
			}
			p.start, haveStart = n, true
		case "generated":
			if n, err := strconv.ParseInt(string(value), 10, 64); err == nil {
				p.generated, p.hasGenerated = n, true
			}
		case "bucket":
			if err := json.Unmarshal(value, &p.bucket); err != nil {
				return bad("bucket is not a string")
			}
			haveBucket = true
		}
		p.config = append(p.config, field{name: name, rawName: bytes.Clone(rawName), value: value})
	}
	if tok, err := d.Token(); err != nil || tok != json.Delim('}') {
		return bad("unterminated")
	}
	if !haveStart || !haveBucket {
		return bad("no start or bucket")
	}
	return nil
}
