// Package projection applies a plan's limited data mode: an allowlist of
// fields per endpoint, compiled once per plan and applied to the upstream's
// full JSON representation after the cache.
//
// Projection never sees a key, a request or a cache entry: bytes in, bytes
// out. It fails closed: a body it cannot parse, or an output that would carry
// a field the plan does not list, is an error and nothing is returned.
//
// The JSON scanner here is hand-written on purpose. A projector on
// github.com/go-json-experiment/json/jsontext (tokens in, allowed members'
// raw values out, no leak check) measured 310 µs and 56 allocations per
// one-week hourly series body, against 218 µs and 2 allocations for this
// one with its leak check (BenchmarkProjectSeries, same machine, November 2026);
// the bar for switching was within 10% and no more allocations.
package projection

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"trendgate/api"
)

// ErrLeak is returned by Projection.Apply when the projected body
// would carry a field the plan does not allow, or when the projector's own
// output fails its check in any other way. The projection fails closed: the
// body is withheld and the gateway answers 500. It always signals a gateway
// bug, never a bad upstream answer.
var ErrLeak = errors.New("projection: would leak a field the plan does not allow")

// Plan is what Compile needs of a plan: its data mode and, in the limited
// mode, the allowlist of fields per endpoint. The application's
// configuration fills it (config.Plan.Projection). The zero Plan has no
// data mode and does not compile.
type Plan struct {
	// DataMode is "full" (every body passes unchanged) or "limited"
	// (Fields applies).
	DataMode string
	// Fields is the allowlist of the limited mode.
	Fields Fields
}

// Fields is a limited plan's allowlist per endpoint: the fields kept in
// each list item, the top-level whatsup fields, the fields kept in each
// series row, and the TSV metrics the plan may download. It fails closed:
// a nil or empty list keeps nothing of that endpoint.
type Fields struct {
	List    []string
	Whatsup []string
	Series  []string
	TSV     []string
}

// The data modes of Plan.DataMode.
const (
	projModeFull    = "full"
	projModeLimited = "limited"
)

// projMaxDepth bounds the nesting of JSON values the projector reads, as
// encoding/json bounds its own; deeper input is an error, not a stack blow-up.
const projMaxDepth = 10000

// projLimitedMember is appended to every config object a limited projection
// emits.
const projLimitedMember = `"data_mode":"limited"`

// Projection is a plan's compiled data projection (limited data mode): an
// allowlist of fields per endpoint. A nil *Projection is the full data mode
// and passes every body through unchanged. A non-nil Projection is immutable
// and safe for concurrent use; build it with Compile. The zero
// Projection is limited and allows no field and no TSV metric.
type Projection struct {
	list    projSet // fields kept in each topic list item
	series  projSet // fields kept in each time-series row
	whatsup projSet // top-level whatsup fields kept besides "config"
	tsv     projSet // TSV metrics the plan may download

	// afterProject, when non-nil, rewrites the projector's output before it
	// is verified. It exists only so tests can inject a projector bug and
	// watch the verification catch it; production code never sets it.
	afterProject func([]byte) []byte
}

// Compile compiles a plan's data mode and field allowlists. It
// returns nil (the full, identity projection) for DataMode "full", a limited
// Projection for DataMode "limited", and an error for any other data mode,
// including the empty one: an unset mode must not silently mean "full".
func Compile(p Plan) (*Projection, error) {
	switch p.DataMode {
	case projModeFull:
		return nil, nil
	case projModeLimited:
		return &Projection{
			list:    newProjSet(p.Fields.List),
			series:  newProjSet(p.Fields.Series),
			whatsup: newProjSet(p.Fields.Whatsup),
			tsv:     newProjSet(p.Fields.TSV),
		}, nil
	}
	return nil, fmt.Errorf("projection: unknown data_mode %q (want %q or %q)", p.DataMode, projModeFull, projModeLimited)
}

// Limited reports whether p is a limited projection; it is false for nil
// (full data mode).
func (p *Projection) Limited() bool { return p != nil }

// AllowsMetric reports whether the plan may download the TSV metric. A nil
// (full) Projection allows every metric.
func (p *Projection) AllowsMetric(metric string) bool {
	if p == nil {
		return true
	}
	_, ok := p.tsv[metric]
	return ok
}

// Apply projects the upstream's full JSON body for endpoint ep.
//
// A nil (full) Projection returns body itself, as does any Projection for
// EndpointTSV (a metric is allowed whole or not at all; see AllowsMetric).
// A limited Projection returns a new slice and never modifies body:
//   - list: only the top-level "data" is kept, and each item keeps only the
//     allowed list fields;
//   - series: "config" is kept and "data" rows keep only the allowed series
//     fields; other top-level members are dropped;
//   - whatsup: only "config" and the allowed top-level fields are kept.
//
// Every config object emitted gets "data_mode":"limited" (any upstream
// data_mode member is replaced), and a series or whatsup body without a
// config gets one. Key order and the bytes of every kept value (numbers as
// written) are preserved; whitespace between members is not. The result
// has no spare capacity, so it can be memoized as it is.
//
// Malformed JSON or an unexpected shape (a data item that is not an object,
// for instance) returns an error: the upstream's answer is bad. Every output
// is then checked again by an independent pass; if it would carry a field
// that is not allowed, Apply returns an error wrapping ErrLeak.
func (p *Projection) Apply(ep api.Endpoint, body []byte) ([]byte, error) {
	if p == nil || ep == api.EndpointTSV {
		return body, nil
	}
	if ep != api.EndpointList && ep != api.EndpointSeries && ep != api.EndpointWhatsup {
		return nil, fmt.Errorf("%w: cannot project endpoint %s", ErrLeak, ep)
	}
	scratch := projScratch.Get().(*[]byte)
	defer projPutScratch(scratch)
	out, err := p.project((*scratch)[:0], ep, body)
	*scratch = out
	if err != nil {
		return nil, fmt.Errorf("projection: projecting %s body: %w", ep, err)
	}
	if p.afterProject != nil {
		out = p.afterProject(out)
	}
	if err := p.verify(ep, out); err != nil {
		return nil, err
	}
	// A copy of exactly the right size: callers memoize the result, and
	// the scratch buffer goes back to the pool.
	return append(make([]byte, 0, len(out)), out...), nil
}

// projScratch holds buffers that projections are built in before being
// copied out at their exact size, so a cold projection allocates its
// result and little else.
var projScratch = sync.Pool{New: func() any { return new([]byte) }}

// projMaxScratch is the largest buffer returned to projScratch; a buffer
// grown by a rare huge body is left to the garbage collector.
const projMaxScratch = 1 << 20

func projPutScratch(b *[]byte) {
	if cap(*b) <= projMaxScratch {
		projScratch.Put(b)
	}
}

// project appends the limited body for a list, series or whatsup response
// to out and returns the extended slice. On error it returns the slice
// emptied, so its storage can be reused.
func (p *Projection) project(out []byte, ep api.Endpoint, b []byte) ([]byte, error) {
	i := projSkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return out[:0], errors.New("body is not a JSON object")
	}
	out = append(out, '{')
	wantConfig := ep != api.EndpointList
	sawConfig := false
	n := 0 // members written
	it := projObjIter{b: b, pos: i + 1}
	for {
		m, ok, err := it.next()
		if err != nil {
			return out[:0], err
		}
		if !ok {
			break
		}
		switch {
		case wantConfig && m.keyIs(b, "config"):
			out = projComma(out, n)
			out = append(out, b[m.keyStart:m.keyEnd]...)
			out = append(out, ':')
			out, it.pos, err = projConfig(out, b, m.valStart)
			sawConfig = true
			n++
		case ep != api.EndpointWhatsup && m.keyIs(b, "data"):
			items := p.list
			if ep == api.EndpointSeries {
				items = p.series
			}
			out = projComma(out, n)
			out = append(out, b[m.keyStart:m.keyEnd]...)
			out = append(out, ':')
			out, it.pos, err = projItems(out, b, m.valStart, items)
			n++
		default:
			var end int
			end, err = projSkipValue(b, m.valStart, 1)
			if err == nil && ep == api.EndpointWhatsup && p.whatsup.hasMember(b, m) {
				out = projComma(out, n)
				out = append(out, b[m.keyStart:m.keyEnd]...)
				out = append(out, ':')
				out = append(out, b[m.valStart:end]...)
				n++
			}
			it.pos = end
		}
		if err != nil {
			return out[:0], err
		}
	}
	if j := projSkipWS(b, it.pos); j != len(b) {
		return out[:0], fmt.Errorf("unexpected data after the JSON value at offset %d", j)
	}
	if wantConfig && !sawConfig {
		out = projComma(out, n)
		out = append(out, `"config":{`+projLimitedMember+`}`...)
	}
	return append(out, '}'), nil
}

// projConfig copies the config object starting at b[i] to out, without any
// data_mode member, and appends "data_mode":"limited". It returns the
// extended out (also on error) and the offset just after the object.
func projConfig(out, b []byte, i int) ([]byte, int, error) {
	if b[i] != '{' {
		return out, 0, errors.New(`"config" is not an object`)
	}
	out = append(out, '{')
	out, n, pos, err := projCopyMembers(out, b, i, 2, func(m projMember) bool { return !m.keyIs(b, "data_mode") })
	if err != nil {
		return out, 0, err
	}
	out = projComma(out, n)
	out = append(out, projLimitedMember...)
	return append(out, '}'), pos, nil
}

// projItems copies the "data" array starting at b[i] to out, keeping only
// the allowed members of each item. A null array is copied as null. It
// returns the extended out (also on error) and the offset just after the
// array.
func projItems(out, b []byte, i int, allowed projSet) ([]byte, int, error) {
	if b[i] == 'n' {
		end, err := projSkipValue(b, i, 1)
		if err != nil {
			return out, 0, err
		}
		return append(out, "null"...), end, nil
	}
	if b[i] != '[' {
		return out, 0, errors.New(`"data" is not an array`)
	}
	out = append(out, '[')
	n := 0
	it := projArrIter{b: b, pos: i + 1}
	for {
		start, ok, err := it.next()
		if err != nil {
			return out, 0, err
		}
		if !ok {
			break
		}
		if b[start] != '{' {
			return out, 0, fmt.Errorf(`"data" item at offset %d is not an object`, start)
		}
		out = projComma(out, n)
		out, it.pos, err = projItem(out, b, start, allowed)
		if err != nil {
			return out, 0, err
		}
		n++
	}
	return append(out, ']'), it.pos, nil
}

// projItem copies the object starting at b[i] to out with only its allowed
// members. It returns the extended out (also on error) and the offset just
// after the object.
func projItem(out, b []byte, i int, allowed projSet) ([]byte, int, error) {
	out = append(out, '{')
	out, _, pos, err := projCopyMembers(out, b, i, 3, func(m projMember) bool { return allowed.hasMember(b, m) })
	if err != nil {
		return out, 0, err
	}
	return append(out, '}'), pos, nil
}

// projCopyMembers copies to out the members of the object starting at b[i]
// for which keep is true, comma-separated, without the braces. depth is the
// object's nesting depth for projSkipValue. It returns the extended out
// (also on error), how many members it copied, and the offset just after
// the object.
func projCopyMembers(out, b []byte, i, depth int, keep func(projMember) bool) ([]byte, int, int, error) {
	n := 0
	it := projObjIter{b: b, pos: i + 1}
	for {
		m, ok, err := it.next()
		if err != nil {
			return out, n, 0, err
		}
		if !ok {
			return out, n, it.pos, nil
		}
		end, err := projSkipValue(b, m.valStart, depth)
		if err != nil {
			return out, n, 0, err
		}
		it.pos = end
		if keep(m) {
			out = projComma(out, n)
			out = append(out, b[m.keyStart:m.keyEnd]...)
			out = append(out, ':')
			out = append(out, b[m.valStart:end]...)
			n++
		}
	}
}

// projComma appends the separator needed before member or element number n.
func projComma(out []byte, n int) []byte {
	if n > 0 {
		return append(out, ',')
	}
	return out
}

// projSet is a set of allowed field names. A nil set allows nothing.
type projSet map[string]struct{}

func newProjSet(names []string) projSet {
	s := make(projSet, len(names))
	for _, n := range names {
		s[n] = struct{}{}
	}
	return s
}

func (s projSet) has(name string) bool {
	_, ok := s[name]
	return ok
}

// hasMember reports whether the decoded key of member m is in the set,
// without allocating when the key has no escapes.
func (s projSet) hasMember(b []byte, m projMember) bool {
	if !m.escaped {
		_, ok := s[string(b[m.keyStart+1:m.keyEnd-1])]
		return ok
	}
	return s.has(m.key(b))
}

// projMember locates one member of a JSON object in its body.
type projMember struct {
	keyStart, keyEnd int  // the key string, quotes included
	escaped          bool // the key contains a backslash escape
	valStart         int  // the first byte of the value
}

// keyIs reports whether the member's decoded key is name, without
// allocating when the key has no escapes.
func (m projMember) keyIs(b []byte, name string) bool {
	if !m.escaped {
		return string(b[m.keyStart+1:m.keyEnd-1]) == name
	}
	return m.key(b) == name
}

// key returns the member's decoded key. A key that cannot be decoded (never
// the case for a key projSkipString accepted) decodes to "", which no
// allowlist the projector consults for this purpose contains.
func (m projMember) key(b []byte) string {
	raw := b[m.keyStart:m.keyEnd]
	if !m.escaped {
		return string(raw[1 : len(raw)-1])
	}
	return projDecodeString(raw)
}

// projDecodeString decodes a JSON string literal (quotes included) the way
// encoding/json does; it returns "" when raw is not a valid literal.
func projDecodeString(raw []byte) string {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return ""
	}
	return s
}

// projObjIter walks the members of one JSON object. pos starts just after
// the '{'; after next returns a member the caller must set pos to the end of
// the member's value. When next returns ok false, pos is just after the '}'.
type projObjIter struct {
	b       []byte
	pos     int
	started bool
}

func (it *projObjIter) next() (m projMember, ok bool, err error) {
	b := it.b
	i := projSkipWS(b, it.pos)
	if i >= len(b) {
		return m, false, errors.New("unexpected end of JSON object")
	}
	if !it.started {
		it.started = true
		if b[i] == '}' {
			it.pos = i + 1
			return m, false, nil
		}
	} else {
		switch b[i] {
		case '}':
			it.pos = i + 1
			return m, false, nil
		case ',':
			i = projSkipWS(b, i+1)
		default:
			return m, false, fmt.Errorf("want ',' or '}' at offset %d", i)
		}
	}
	if i >= len(b) || b[i] != '"' {
		return m, false, fmt.Errorf("want an object key at offset %d", i)
	}
	end, escaped, err := projSkipString(b, i)
	if err != nil {
		return m, false, err
	}
	m.keyStart, m.keyEnd, m.escaped = i, end, escaped
	i = projSkipWS(b, end)
	if i >= len(b) || b[i] != ':' {
		return m, false, fmt.Errorf("want ':' at offset %d", i)
	}
	i = projSkipWS(b, i+1)
	if i >= len(b) {
		return m, false, errors.New("unexpected end of JSON object")
	}
	m.valStart = i
	it.pos = i
	return m, true, nil
}

// projArrIter walks the elements of one JSON array. pos starts just after
// the '['; after next returns an element start the caller must set pos to
// the end of the element. When next returns ok false, pos is just after the
// ']'.
type projArrIter struct {
	b       []byte
	pos     int
	started bool
}

func (it *projArrIter) next() (start int, ok bool, err error) {
	b := it.b
	i := projSkipWS(b, it.pos)
	if i >= len(b) {
		return 0, false, errors.New("unexpected end of JSON array")
	}
	if !it.started {
		it.started = true
		if b[i] == ']' {
			it.pos = i + 1
			return 0, false, nil
		}
	} else {
		switch b[i] {
		case ']':
			it.pos = i + 1
			return 0, false, nil
		case ',':
			i = projSkipWS(b, i+1)
		default:
			return 0, false, fmt.Errorf("want ',' or ']' at offset %d", i)
		}
	}
	if i >= len(b) {
		return 0, false, errors.New("unexpected end of JSON array")
	}
	it.pos = i
	return i, true, nil
}

// projSkipWS returns the offset of the first non-whitespace byte at or after
// i (len(b) if there is none).
func projSkipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// projSkipValue checks the JSON value starting at b[i] (no leading
// whitespace) and returns the offset just after it. depth is the nesting
// depth of the container holding the value.
func projSkipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("unexpected end of JSON input")
	}
	switch c := b[i]; {
	case c == '{':
		if depth >= projMaxDepth {
			return 0, errors.New("JSON nested too deeply")
		}
		it := projObjIter{b: b, pos: i + 1}
		for {
			m, ok, err := it.next()
			if err != nil {
				return 0, err
			}
			if !ok {
				return it.pos, nil
			}
			if it.pos, err = projSkipValue(b, m.valStart, depth+1); err != nil {
				return 0, err
			}
		}
	case c == '[':
		if depth >= projMaxDepth {
			return 0, errors.New("JSON nested too deeply")
		}
		it := projArrIter{b: b, pos: i + 1}
		for {
			start, ok, err := it.next()
			if err != nil {
				return 0, err
			}
			if !ok {
				return it.pos, nil
			}
			if it.pos, err = projSkipValue(b, start, depth+1); err != nil {
				return 0, err
			}
		}
	case c == '"':
		end, _, err := projSkipString(b, i)
		return end, err
	case c == '-' || ('0' <= c && c <= '9'):
		return projSkipNumber(b, i)
	case c == 't':
		return projSkipLiteral(b, i, "true")
	case c == 'f':
		return projSkipLiteral(b, i, "false")
	case c == 'n':
		return projSkipLiteral(b, i, "null")
	}
	return 0, fmt.Errorf("invalid character %q at offset %d", b[i], i)
}

// projSkipString checks the string literal starting at b[i] == '"' and
// returns the offset just after its closing quote and whether it contains
// an escape. Bytes are not checked for UTF-8 validity, as encoding/json
// does not reject invalid UTF-8 either.
func projSkipString(b []byte, i int) (end int, escaped bool, err error) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, escaped, nil
		case c == '\\':
			escaped = true
			j++
			if j >= len(b) {
				return 0, false, errors.New("unexpected end of JSON string")
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) {
					return 0, false, errors.New("unexpected end of JSON string")
				}
				for _, h := range b[j+1 : j+5] {
					if !projIsHex(h) {
						return 0, false, fmt.Errorf("invalid \\u escape at offset %d", j)
					}
				}
				j += 4
			default:
				return 0, false, fmt.Errorf("invalid escape at offset %d", j)
			}
		case c < 0x20:
			return 0, false, fmt.Errorf("control character in JSON string at offset %d", j)
		}
	}
	return 0, false, errors.New("unexpected end of JSON string")
}

func projIsHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

// projSkipNumber checks the number starting at b[i] against the JSON grammar
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and returns the offset just
// after it.
func projSkipNumber(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = projSkipDigits(b, i+1)
	default:
		return 0, fmt.Errorf("invalid number at offset %d", start)
	}
	if i < len(b) && b[i] == '.' {
		j := projSkipDigits(b, i+1)
		if j == i+1 {
			return 0, fmt.Errorf("invalid number at offset %d", start)
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := projSkipDigits(b, i)
		if j == i {
			return 0, fmt.Errorf("invalid number at offset %d", start)
		}
		i = j
	}
	return i, nil
}

func projSkipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// projSkipLiteral checks that b[i:] starts with lit and returns the offset
// just after it.
func projSkipLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, fmt.Errorf("invalid literal at offset %d", i)
	}
	return i + len(lit), nil
}

// verify is the fail-closed guard: a second pass over a projected body,
// independent of the projector's parser, that checks every top-level key
// and every key of every "data" item (list, series) against the allowlist,
// and that every config object carries "data_mode":"limited". It returns an
// error wrapping ErrLeak on any violation.
func (p *Projection) verify(ep api.Endpoint, out []byte) error {
	v := projVerifier{ep: ep}
	switch ep {
	case api.EndpointList:
		v.items, v.checkItems = p.list, true
		v.top = projTopList
	case api.EndpointSeries:
		v.items, v.checkItems = p.series, true
		v.top = projTopSeries
		v.needConfig = true
	case api.EndpointWhatsup:
		v.top = p.whatsup
		v.needConfig = true
	default:
		return v.leak("no allowlist")
	}
	return v.run(out)
}

// The top-level keys a limited list or series body may have. Read-only.
var (
	projTopList   = projSet{"data": {}}
	projTopSeries = projSet{"data": {}, "config": {}}
)

// projVerifier is the state of one verify pass. It relies on encoding/json's
// json.Valid for syntax and otherwise tracks only strings and nesting.
type projVerifier struct {
	ep         api.Endpoint
	top        projSet // allowed top-level keys ("config" is allowed when needConfig)
	items      projSet // allowed keys of data items (nil allows none)
	checkItems bool    // "data" is an array of items whose keys are checked
	needConfig bool    // a config with "data_mode":"limited" is required

	stack      []byte // '{' or '[' per open container
	topData    bool   // the current top-level key is "data"
	topConfig  bool   // the current top-level key is "config"
	inConfig   bool   // inside a top-level config object
	cfgMode    bool   // the current key inside that config object is "data_mode"
	cfgHasMode bool   // the current config object has "data_mode":"limited"
	configs    int    // config objects closed so far
}

func (v *projVerifier) leak(format string, args ...any) error {
	return fmt.Errorf("%w: %s: "+format, append([]any{ErrLeak, v.ep}, args...)...)
}

func (v *projVerifier) run(out []byte) error {
	if !json.Valid(out) {
		return v.leak("output is not valid JSON")
	}
	var stackBuf [32]byte
	v.stack = stackBuf[:0]
	for i := 0; i < len(out); {
		c := out[i]
		switch c {
		case ' ', '\t', '\n', '\r', ',', ':':
			i++
		case '{', '[':
			if err := v.value(c); err != nil {
				return err
			}
			if c == '{' && len(v.stack) == 1 && v.topConfig {
				v.inConfig, v.cfgHasMode, v.cfgMode = true, false, false
			}
			v.stack = append(v.stack, c)
			i++
		case '}', ']':
			v.stack = v.stack[:len(v.stack)-1]
			if c == '}' && v.inConfig && len(v.stack) == 1 {
				if !v.cfgHasMode {
					return v.leak(`config without "data_mode":"limited"`)
				}
				v.inConfig = false
				v.configs++
			}
			i++
		case '"':
			end := i + 1
			escaped := false
			for out[end] != '"' {
				if out[end] == '\\' {
					escaped = true
					end++
				}
				end++
			}
			end++
			j := end
			for j < len(out) && (out[j] == ' ' || out[j] == '\t' || out[j] == '\n' || out[j] == '\r') {
				j++
			}
			var err error
			if j < len(out) && out[j] == ':' {
				err = v.key(out[i:end], escaped)
			} else {
				err = v.stringValue(out[i:end])
			}
			if err != nil {
				return err
			}
			i = end
		default: // a number or a literal
			if err := v.value(c); err != nil {
				return err
			}
			if v.inConfig && len(v.stack) == 2 && v.cfgMode {
				return v.leak("config data_mode is not a string")
			}
			for i < len(out) && !projIsDelim(out[i]) {
				i++
			}
		}
	}
	if v.needConfig && v.configs == 0 {
		return v.leak("no config object")
	}
	return nil
}

// key checks an object key (raw, quotes included) at the current position.
func (v *projVerifier) key(raw []byte, escaped bool) error {
	name := raw[1 : len(raw)-1]
	if escaped {
		name = []byte(projDecodeString(raw))
	}
	switch {
	case len(v.stack) == 1:
		v.topData = string(name) == "data"
		v.topConfig = string(name) == "config"
		if _, ok := v.top[string(name)]; !ok && !(v.needConfig && v.topConfig) {
			return v.leak("top-level key %q", name)
		}
	case len(v.stack) == 3 && v.checkItems && v.topData && v.stack[1] == '[' && v.stack[2] == '{':
		if _, ok := v.items[string(name)]; !ok {
			return v.leak("data item key %q", name)
		}
	case len(v.stack) == 2 && v.inConfig:
		v.cfgMode = string(name) == "data_mode"
	}
	return nil
}

// stringValue checks a string value (raw, quotes included) at the current
// position.
func (v *projVerifier) stringValue(raw []byte) error {
	if err := v.value('"'); err != nil {
		return err
	}
	if v.inConfig && len(v.stack) == 2 && v.cfgMode {
		if string(raw) != `"`+projModeLimited+`"` && projDecodeString(raw) != projModeLimited {
			return v.leak("config data_mode %s", raw)
		}
		v.cfgHasMode = true
	}
	return nil
}

// value checks the position of a value starting with byte c.
func (v *projVerifier) value(c byte) error {
	switch {
	case len(v.stack) == 0 && c != '{':
		return v.leak("top level is not an object")
	case len(v.stack) == 1 && v.checkItems && v.topData && c != '[' && c != 'n':
		return v.leak(`"data" is not an array`)
	case len(v.stack) == 1 && v.needConfig && v.topConfig && c != '{':
		return v.leak(`"config" is not an object`)
	case len(v.stack) == 2 && v.checkItems && v.topData && v.stack[1] == '[' && c != '{':
		return v.leak(`"data" item is not an object`)
	}
	return nil
}

// projIsDelim reports whether c ends a number or literal in valid JSON.
func projIsDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
