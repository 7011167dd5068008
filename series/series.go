// Package series answers a time-series request for an absolute window from
// the rows of a wider answer the gateway already holds.
//
// The rows of a bucket are the same whichever window asked for them, so a
// request for the buckets from Start through End (an absolute window, see
// api.Request) can be cut from any answer of the same topic and bucket
// size whose rows cover that range: its rows in range, in order, under the
// wider answer's config with the window rewritten as the upstream writes it
// for an absolute window ("start" and "end" as sent, no "interval").
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
// over an absolute window.
func Derivable(q api.Request) bool {
	return q.Endpoint == api.EndpointSeries && q.Interval == "" && q.Start != 0 && q.End != 0
}

// ErrNotCovered means the wider answer does not hold every bucket of the
// narrow window (it starts later or ends earlier).
var ErrNotCovered = errors.New("series: window not covered by the wider answer")

// Cut returns the answer to narrow made from wide, the body of an answer
// for the same topic and bucket size whose window covers narrow's: the
// rows whose time lies in [narrow.Start, narrow.End] and wide's config with
// "interval" dropped and "start" and "end" set as the upstream echoes them
// for narrow's upstream query. It reports the number of rows kept. wide
// covers narrow when its config's start is at or before narrow.Start and it
// has a row at or after narrow.End (the upstream always sends the current
// bucket, so a row at or past End means nothing up to End is still to
// come). Anything else, an answer without rows included, is
// ErrNotCovered; a body that is not the upstream's series shape, or of
// another bucket size, is an error.
func Cut(wide []byte, narrow api.Request) (body []byte, rows int, err error) {
	return cut(wide, narrow, false)
}

// CutReaching is Cut for a wide answer its caller knows to reach
// narrow.End (it asked for a window that does, just now): only the start
// is checked, so an answer without rows gives a narrow answer without rows.
func CutReaching(wide []byte, narrow api.Request) (body []byte, rows int, err error) {
	return cut(wide, narrow, true)
}

func cut(wide []byte, narrow api.Request, reaches bool) (body []byte, rows int, err error) {
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
	if p.start > narrow.Start || !reaches && (len(p.rows) == 0 || p.rows[len(p.rows)-1].time < narrow.End) {
		return nil, 0, ErrNotCovered
	}
	sentEnd, err := upstreamEnd(narrow)
	if err != nil {
		return nil, 0, err
	}

	var b bytes.Buffer
	b.Grow(len(wide))
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
			v = strconv.AppendInt(nil, sentEnd, 10)
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
	for _, r := range p.rows {
		if r.time < narrow.Start || r.time > narrow.End {
			continue
		}
		if rows > 0 {
			b.WriteByte(',')
		}
		b.Write(r.raw)
		rows++
	}
	b.WriteString("]}")
	b.Write(p.trailer)
	return b.Bytes(), rows, nil
}

// upstreamEnd is the "end" narrow's upstream query sends.
func upstreamEnd(narrow api.Request) (int64, error) {
	_, after, ok := bytes.Cut([]byte(narrow.UpstreamQuery()), []byte("end="))
	if !ok {
		return 0, errors.New("series: the upstream query has no end")
	}
	end, _, _ := bytes.Cut(after, []byte("&"))
	return strconv.ParseInt(string(end), 10, 64)
}

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
	config  []field
	start   int64
	bucket  string
	rows    []row
	trailer []byte // what follows the top-level object (a newline)
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
