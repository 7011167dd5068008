package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"trendgate/internal/httperr"
)

// Request is a canonical API request: everything the gateway needs to key
// the cache and to build the upstream request, and nothing else. Two client
// requests that select the same data parse to equal Requests; different
// data, different Requests. The zero value is not a valid request (its Key
// is ""); only ParseRequest makes valid ones.
type Request struct {
	Endpoint Endpoint
	// Topic is decoded and lower-cased ("#ai", "ai agents", "$capitalism").
	// Empty for the list endpoint.
	Topic string
	// Bucket is "hour" or "day" (series only).
	Bucket string
	// Interval is one of 1d 1w 1m 3m 6m 1y all (series only); empty when an
	// absolute window (Start, End) is used.
	Interval string
	// Start and End are the bounds of an absolute window in unix seconds
	// (series only); both zero when Interval is used, End zero when the
	// client gave only start (the window runs to the upstream's now). Each
	// is canonical (see StartBound): a bucket boundary as given, or a fixed
	// second inside the bucket it falls in, so every bound inside one
	// bucket has one form; except a start without end within 10 minutes of
	// now, which is kept to the second (the upstream compares it with its
	// own now). How the upstream turns bounds into buckets
	// (is the bucket of an end inclusive? of a start?) is not assumed here:
	// under every such reading, all bounds with one canonical form select
	// the same buckets, so normalizing never changes the answer.
	Start, End int64
	// clientStart is the client's own start, to the second, when the
	// window has only a start and Start is its canonical form (0
	// otherwise; see ClientStart). It is not part of the key: every client
	// start in one bucket shares one entry and one upstream request.
	clientStart int64
	// Metric is the TSV metric (tsv only).
	Metric string
	// Route is the configured route (EndpointRoute only; nil otherwise).
	Route *Route
	// Path and Query are a route's canonical upstream path (parameters
	// checked and re-encoded) and query (its accepted parameters, sorted
	// by name and escaped); both empty for the built-in endpoints.
	Path, Query string
}

// AllowedMethods is the value of the Allow header that goes with
// ErrMethodNotAllowed.
const AllowedMethods = "GET, HEAD"

// keyVersion prefixes every cache key; bump it when the key layout or the
// meaning of a field changes, so old entries can never be read as new ones.
const keyVersion = "v2|" // v2: absolute windows keyed by canonical bounds (Bound)

// The routes, compared byte for byte with the escaped path.
const (
	listPath       = "/api4/public/topics/list/v1"
	apiTopicPrefix = "/api4/public/topic/"
	whatsupTail    = "/whatsup/v1"
	seriesTail     = "/time-series/v1"
	tsvPrefix      = "/topic/"
	tsvMiddle      = "/time-series/"
	tsvSuffix      = ".tsv"
)

// Limits and defaults of the parameters.
const (
	maxTopicLen      = 64 // bytes, after decoding
	hourSeconds      = 3600
	daySeconds       = 86400 // buckets are UTC days
	onlyEndSpan      = 7 * daySeconds
	maxUnixDigits    = 10
	maxUnix          = 9999999999
	defaultBucket    = "hour"
	defaultInterval  = "1w"
	seriesParamsText = "bucket, interval, start and end"
)

// ParseRequest turns r into a canonical Request, rejecting anything it does
// not understand instead of guessing: only GET and HEAD without a body, only
// the four routes matched byte for byte on r.URL.EscapedPath(), only valid
// topics and only the endpoint's own query parameters, each at most once.
// now is the upstream's now as best known: it decides which starts without
// end are near it, and so kept to the second.
//
// The error is always an *httperr.Error: ErrMethodNotAllowed (405),
// ErrNotFound (404), or a 400 whose code names the problem (body_not_allowed,
// invalid_path, invalid_topic, invalid_metric, invalid_query, key_in_query,
// unknown_parameter, duplicate_parameter, invalid_bucket, invalid_interval,
// invalid_start, invalid_end, invalid_window). Its message says
// what was wrong and what is accepted. It never contains a path or query
// value and quotes an unknown parameter name only when that is 1 to 20
// bytes of [a-z0-9_], so it cannot echo an API key.
//
// HEAD parses exactly like GET. The same r and now always give the same
// result, and ParseRequest does not modify r.
//
// Decided edge cases: unix time 0 (and any number with a leading zero) is
// rejected, as no data is that old; an interval given together with start or
// end must still be valid but is otherwise ignored; bounds in the future
// are not refused here (the upstream's clock is its own; the proxy, which
// learns that clock, refuses a start-only window that starts after it); with only end the window starts 7 days before it; with only start
// it runs to the upstream's now (End is 0).
func ParseRequest(r *http.Request, now time.Time) (Request, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return Request{}, ErrMethodNotAllowed
	}
	// ContentLength is -1 when a body of unknown length is coming (HTTP/2
	// without Content-Length), so anything but 0 is a body.
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return Request{}, errBody
	}
	// A raw '#' or space never reaches the path as such: url.ParseRequestURI
	// keeps it and EscapedPath re-escapes it to %23 or %20, which would make
	// "/topic/#ai" look like "/topic/%23ai". Only the raw target shows it.
	if !validTarget(r.RequestURI) {
		return Request{}, errTarget
	}
	if r.URL == nil {
		return Request{}, ErrNotFound
	}
	var q Request
	if e := q.route(r.URL.EscapedPath()); e != nil {
		return Request{}, e
	}
	if e := q.parseQuery(r.URL.RawQuery, now); e != nil {
		return Request{}, e
	}
	return q, nil
}

// validTarget reports whether the raw request-target is free of bytes that
// the URL parser would silently re-escape into topic characters. An empty
// target (a request built in a client or test) has nothing to check.
func validTarget(target string) bool {
	for i := 0; i < len(target); i++ {
		if c := target[i]; c == '#' || c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// route matches the escaped path against the four routes and fills
// Endpoint, Topic and Metric.
func (q *Request) route(path string) *httperr.Error {
	var seg, metric string
	switch {
	case path == listPath:
		q.Endpoint = EndpointList
		return nil
	case strings.HasPrefix(path, apiTopicPrefix):
		var tail string
		seg, tail = cutSegment(path[len(apiTopicPrefix):])
		switch tail {
		case whatsupTail:
			q.Endpoint = EndpointWhatsup
		case seriesTail:
			q.Endpoint = EndpointSeries
		default:
			return ErrNotFound
		}
	case strings.HasPrefix(path, tsvPrefix):
		var tail string
		seg, tail = cutSegment(path[len(tsvPrefix):])
		file, ok := strings.CutPrefix(tail, tsvMiddle)
		if !ok || strings.IndexByte(file, '/') >= 0 {
			return ErrNotFound
		}
		if metric, ok = strings.CutSuffix(file, tsvSuffix); !ok {
			return ErrNotFound
		}
		q.Endpoint = EndpointTSV
	default:
		return ErrNotFound
	}
	// "//" and dot segments are path shapes, not topics; a client that
	// sends them has a broken URL builder, and nothing is cleaned for it.
	if seg == "" || seg == "." || seg == ".." {
		return ErrNotFound
	}
	topic, e := decodeTopic(seg)
	if e != nil {
		return e
	}
	q.Topic = topic
	if q.Endpoint == EndpointTSV {
		switch metric {
		case "interactions", "posts_active", "contributors_active", "sentiment":
			q.Metric = metric
		default:
			return errMetric
		}
	}
	return nil
}

// cutSegment splits p at its first '/': the segment before it and the rest
// starting with the '/'. Without a '/', rest is "".
func cutSegment(p string) (seg, rest string) {
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i], p[i:]
	}
	return p, ""
}

// CanonicalTopic returns the canonical form of an already decoded topic
// name (as a query parameter yields it), by the same rules as a topic in a
// request path: ASCII upper case folds, and the result must be 1 to 64
// bytes of [a-z0-9 #$] with single inner spaces. Anything else, a '+' or
// '%' included, is a 400 invalid_topic error.
func CanonicalTopic(topic string) (string, error) {
	if strings.ContainsAny(topic, "+%") {
		return "", errTopicChars
	}
	t, err := decodeTopic(topic)
	if err != nil {
		return "", err
	}
	return t, nil
}

// decodeTopic turns an escaped path segment into a canonical topic: '+' is
// a space, %XX is decoded exactly once, A-Z is folded to a-z, and the result
// must be 1 to 64 bytes of [a-z0-9 #$] that neither starts nor ends with a
// space and holds no double space. It allocates only when the segment is not
// already canonical.
func decodeTopic(seg string) (string, *httperr.Error) {
	var buf [maxTopicLen]byte
	n := 0
	same := true // the decoded bytes so far equal seg's bytes
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case c == '+':
			c, same = ' ', false
		case c == '%':
			if i+2 >= len(seg) {
				return "", errTopicEscape
			}
			hi, ok1 := unhex(seg[i+1])
			lo, ok2 := unhex(seg[i+2])
			if !ok1 || !ok2 {
				return "", errTopicEscape
			}
			c, same = hi<<4|lo, false
			i += 2
		case 'A' <= c && c <= 'Z':
			same = false
		}
		if n == maxTopicLen {
			return "", errTopicLong
		}
		if !topicByte(c) {
			return "", errTopicChars
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A' // a decoded %41..%5A folds like a raw letter
		}
		buf[n] = c
		n++
	}
	t := buf[:n]
	if n == 0 || t[0] == ' ' || t[n-1] == ' ' {
		return "", errTopicChars
	}
	for i := 1; i < n; i++ {
		if t[i] == ' ' && t[i-1] == ' ' {
			return "", errTopicChars
		}
	}
	if same {
		return seg, nil
	}
	return string(t), nil
}

// topicByte reports whether c may appear in a topic once upper case has
// been folded: a-z, 0-9, space, '#', '$' (and A-Z, folded by the caller).
func topicByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' ||
		c == ' ' || c == '#' || c == '$'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// keyParam reports whether a query parameter name is one clients use to
// pass API keys, compared case-insensitively.
func keyParam(name string) bool {
	for _, k := range [...]string{"key", "api_key", "apikey", "token", "access_token"} {
		if strings.EqualFold(name, k) {
			return true
		}
	}
	return false
}

// The time-series parameters, indexing queryParams.
const (
	paramBucket = iota
	paramInterval
	paramStart
	paramEnd
	numParams
)

var paramNames = [numParams]string{"bucket", "interval", "start", "end"}

// queryParams is what the parser needs from a query string: the first value
// and the count of each time-series parameter, whether a key-like name was
// present, and the smallest other name. It replaces url.Values so the common
// case needs no map.
type queryParams struct {
	value   [numParams]string
	count   [numParams]int
	key     bool   // a name such as key or token was present
	unknown string // the smallest name that is neither a series nor a key name
	other   bool   // unknown is set
}

func (p *queryParams) add(name, value string) {
	for i, n := range paramNames {
		if name == n {
			if p.count[i] == 0 {
				p.value[i] = value
			}
			p.count[i]++
			return
		}
	}
	if keyParam(name) {
		p.key = true
		return
	}
	if !p.other || name < p.unknown {
		p.unknown, p.other = name, true
	}
}

// get returns the value of parameter i and whether it was given; the caller
// has already rejected duplicates.
func (p *queryParams) get(i int) (string, bool) {
	return p.value[i], p.count[i] > 0
}

// maxFastQuery bounds the queries read without url.ParseQuery; it keeps the
// number of parameters far below ParseQuery's own limit of 10000.
const maxFastQuery = 256

// scanQuery reads raw exactly as url.ParseQuery does; ok is false when
// ParseQuery fails (semicolons, bad escapes, too many parameters).
func scanQuery(raw string) (p queryParams, ok bool) {
	if p, ok := scanQueryFast(raw); ok {
		return p, true
	}
	return scanQuerySlow(raw)
}

// scanQueryFast handles queries without '%', '+' or ';' (nearly all of
// them) in place: for those url.ParseQuery unescapes nothing and cannot
// fail, so splitting on '&' and '=' gives the same result without its map.
// FuzzCanonical checks it against scanQuerySlow. ok is false when raw is not
// such a query.
func scanQueryFast(raw string) (p queryParams, ok bool) {
	if len(raw) > maxFastQuery || strings.ContainsAny(raw, "%+;") {
		return queryParams{}, false
	}
	for raw != "" {
		var piece string
		piece, raw, _ = strings.Cut(raw, "&")
		if piece == "" {
			continue
		}
		name, value, _ := strings.Cut(piece, "=")
		p.add(name, value)
	}
	return p, true
}

// scanQuerySlow is url.ParseQuery; ok is false on its error.
func scanQuerySlow(raw string) (p queryParams, ok bool) {
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return queryParams{}, false
	}
	for name, vs := range vals {
		for _, v := range vs {
			p.add(name, v)
		}
	}
	return p, true
}

// parseQuery validates the raw query for q.Endpoint and, for the time
// series, resolves bucket, interval and window. Problems are reported in a
// fixed order (key in query, unknown, duplicate, then bucket, interval,
// start, end) so the answer never depends on map iteration order.
func (q *Request) parseQuery(raw string, now time.Time) *httperr.Error {
	if raw == "" && q.Endpoint != EndpointSeries {
		return nil
	}
	p, ok := scanQuery(raw)
	if !ok {
		return errQuery
	}
	if p.key {
		return errKeyInQuery
	}
	if q.Endpoint != EndpointSeries {
		if p.other || p.count != [numParams]int{} {
			return errNoParams
		}
		return nil
	}
	if p.other {
		return unknownParam(p.unknown)
	}
	for i, n := range p.count {
		if n > 1 {
			return bad(CodeDuplicateParameter, paramNames[i]+" is given more than once; give each parameter at most once")
		}
	}
	return q.resolveSeries(&p, now)
}

// unknownParam builds the 400 for an unknown query parameter. The name is
// quoted only when it is short and plain, so a key pasted as a parameter
// name is never echoed.
func unknownParam(name string) *httperr.Error {
	msg := "unknown query parameter; the time-series endpoint accepts " + seriesParamsText
	if plainName(name) {
		msg = "unknown query parameter " + strconv.Quote(name) + "; the time-series endpoint accepts " + seriesParamsText
	}
	return bad(CodeUnknownParameter, msg)
}

// plainName reports whether a parameter name is safe to echo: 1 to 20
// bytes of [a-z0-9_], far shorter than any API key.
func plainName(name string) bool {
	if name == "" || len(name) > 20 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// resolveSeries fills Bucket and either Interval or the canonical window.
func (q *Request) resolveSeries(p *queryParams, now time.Time) *httperr.Error {
	q.Bucket = defaultBucket
	if v, ok := p.get(paramBucket); ok {
		switch v {
		case "hour", "hours":
			q.Bucket = "hour"
		case "day", "days":
			q.Bucket = "day"
		case "":
			return emptyParam("bucket")
		default:
			return errBucket
		}
	}
	interval := defaultInterval
	if v, ok := p.get(paramInterval); ok {
		switch v {
		case "1d", "1w", "1m", "3m", "6m", "1y", "all":
			interval = v
		case "":
			return emptyParam("interval")
		default:
			return errInterval
		}
	}
	startRaw, hasStart := p.get(paramStart)
	endRaw, hasEnd := p.get(paramEnd)
	if !hasStart && !hasEnd {
		q.Interval = interval
		return nil
	}
	var start, end int64
	var ok bool
	if hasStart {
		if startRaw == "" {
			return emptyParam("start")
		}
		if start, ok = parseUnix(startRaw); !ok {
			return errStart
		}
	}
	if hasEnd {
		if endRaw == "" {
			return emptyParam("end")
		}
		if end, ok = parseUnix(endRaw); !ok {
			return errEnd
		}
	}
	size := bucketSeconds(q.Bucket)
	if hasStart && hasEnd && start >= end {
		return errWindow
	}
	if hasEnd {
		end = EndBound(end, size)
	}
	if !hasStart {
		// Without start the upstream begins 7 days before end, a whole
		// number of buckets, so that start falls where end does.
		if start = end - onlyEndSpan; start < 1 {
			return errEndEarly
		}
	}
	// Bounds in the future are not refused: the upstream's clock may run
	// ahead of ours, and it answers what it has.
	q.Start, q.End = StartBound(start, size), end
	if !hasEnd && start > now.Unix()-exactStartWithin {
		// Without end the upstream ends the window at its own now and
		// refuses a start at or past it: near now, where its clock may be
		// a little behind ours, the second decides the answer.
		q.Start = start
	}
	if !hasEnd && q.Start != start {
		q.clientStart = start
	}
	return nil
}

// exactStartWithin is how close to now a start without end is kept to the
// second instead of in canonical form.
const exactStartWithin = 10 * 60

// StartBound and EndBound return the canonical form of a window's start
// and end t for buckets of size seconds: t itself on a bucket boundary;
// inside a bucket, its second second (StartBound) or its last second
// (EndBound), so a start and an end inside one bucket stay in order. Any
// reading of bounds that depends only on the bucket a bound falls in and
// on whether it lies on the boundary (inclusive or exclusive, floored or
// not) selects the same buckets for t as for its canonical form.
func StartBound(t, size int64) int64 {
	if f := floorTo(t, size); f != t {
		return f + 1
	}
	return t
}

// EndBound: see StartBound.
func EndBound(t, size int64) int64 {
	if f := floorTo(t, size); f != t {
		return min(f+size-1, maxUnix) // the last bucket is cut short by the digits allowed
	}
	return t
}

// parseUnix parses unix seconds written strictly: 1 to 10 decimal digits,
// the first not '0' (so no leading zeros and no 0 itself), nothing else.
func parseUnix(s string) (int64, bool) {
	if s == "" || len(s) > maxUnixDigits || s[0] == '0' {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// bucketSeconds is the length of a bucket: an hour, or a UTC day. It is 0
// for anything else (a zero Request).
func bucketSeconds(bucket string) int64 {
	switch bucket {
	case "hour":
		return hourSeconds
	case "day":
		return daySeconds
	}
	return 0
}

// floorTo rounds t down to a multiple of size, also for negative t.
func floorTo(t, size int64) int64 {
	r := t % size
	if r < 0 {
		r += size
	}
	return t - r
}

// Key returns the versioned canonical cache key, for example
// "v2|series|bitcoin|hour|1w||", "v2|series|#ai|hour||1759968000|1760652000",
// "v2|list", "v2|whatsup|ai agents", "v2|tsv|bitcoin|interactions" or, for a
// configured route, "v2|route|topic_posts|/api4/public/topic/%23ai/posts/v1|limit=10". Fields
// are separated by '|', which no field can contain, so distinct Requests
// have distinct keys. A zero Request has the key "".
func (q Request) Key() string {
	var buf [128]byte
	b := append(buf[:0], keyVersion...)
	switch q.Endpoint {
	case EndpointList:
		b = append(b, "list"...)
	case EndpointWhatsup:
		b = append(b, "whatsup|"...)
		b = append(b, q.Topic...)
	case EndpointSeries:
		b = append(b, "series|"...)
		b = append(b, q.Topic...)
		b = append(b, '|')
		b = append(b, q.Bucket...)
		b = append(b, '|')
		b = append(b, q.Interval...)
		b = append(b, '|')
		if q.Start != 0 {
			b = strconv.AppendInt(b, q.Start, 10)
		}
		b = append(b, '|')
		if q.End != 0 {
			b = strconv.AppendInt(b, q.End, 10)
		}
	case EndpointTSV:
		b = append(b, "tsv|"...)
		b = append(b, q.Topic...)
		b = append(b, '|')
		b = append(b, q.Metric...)
	case EndpointRoute:
		if q.Route == nil {
			return ""
		}
		// Name, escaped path and escaped query hold no '|'.
		b = append(b, "route|"...)
		b = append(b, q.Route.Name...)
		b = append(b, '|')
		b = append(b, q.Path...)
		b = append(b, '|')
		b = append(b, q.Query...)
	default:
		return ""
	}
	return string(b)
}

// UpstreamPath returns the escaped upstream path, with the topic encoded by
// EncodeTopic: "/api4/public/topics/list/v1",
// "/api4/public/topic/%23ai/time-series/v1",
// "/topic/ai%20agents/time-series/sentiment.tsv". A zero Request has the
// path "".
func (q Request) UpstreamPath() string {
	switch q.Endpoint {
	case EndpointList:
		return listPath
	case EndpointWhatsup:
		return apiTopicPrefix + EncodeTopic(q.Topic) + whatsupTail
	case EndpointSeries:
		return apiTopicPrefix + EncodeTopic(q.Topic) + seriesTail
	case EndpointTSV:
		return tsvPrefix + EncodeTopic(q.Topic) + tsvMiddle + q.Metric + tsvSuffix
	case EndpointRoute:
		return q.Path
	}
	return ""
}

// UpstreamQuery returns the upstream query string in a fixed order:
// "bucket=hour&interval=1w", or for an absolute window
// "bucket=day&start=<Start>&end=<End>" (without end when the client gave
// only start). The bounds sent are the canonical ones, which the upstream
// reads as it would read the client's own. For a configured route it is
// the canonical query. It is "" for the other endpoints and for a zero
// Request.
func (q Request) UpstreamQuery() string {
	if q.Endpoint == EndpointRoute {
		return q.Query
	}
	if q.Endpoint != EndpointSeries {
		return ""
	}
	if q.Start == 0 && q.End == 0 {
		return "bucket=" + q.Bucket + "&interval=" + q.Interval
	}
	var buf [64]byte
	b := append(buf[:0], "bucket="...)
	b = append(b, q.Bucket...)
	b = append(b, "&start="...)
	b = strconv.AppendInt(b, q.Start, 10)
	if q.End != 0 {
		b = append(b, "&end="...)
		b = strconv.AppendInt(b, q.End, 10)
	}
	return string(b)
}

// BucketSeconds is the length of q's buckets in seconds: 3600 or 86400 for
// a time series, 0 for anything else.
func (q Request) BucketSeconds() int64 { return bucketSeconds(q.Bucket) }

// ClientStart is the start the client gave for a window with only a
// start, to the second, where Start may be its canonical form: the
// upstream, which ends such a window at its own now, refuses it while its
// now is not past this second, so an answer generated at or before it is
// not an answer to the client's window. For any other Request (and one
// not made by ParseRequest) it is Start.
func (q Request) ClientStart() int64 {
	if q.clientStart != 0 && q.Start != 0 && q.End == 0 {
		return q.clientStart // (a copy made an interval request has none)
	}
	return q.Start
}

// WindowEnd tells freshness when the data selected by q stops changing. It
// is the zero time when the window reaches now (an interval, a window with
// only start, and every endpoint other than the series); for an absolute
// window it is the moment the last bucket End can select closes: the
// bucket End falls in (or begins, on a boundary) ends then.
func (q Request) WindowEnd() time.Time {
	if q.Endpoint != EndpointSeries || q.End == 0 {
		return time.Time{}
	}
	size := bucketSeconds(q.Bucket)
	return time.Unix(floorTo(q.End, size)+size, 0)
}

const upperHex = "0123456789ABCDEF"

// EncodeTopic is the one fixed encoder for topics in upstream paths: a-z and
// 0-9 as they are, space as %20, '#' as %23, '$' as %24. Any other byte
// (never present in a canonical topic) is percent-encoded as %XX too, so the
// result is always a safe path segment. It allocates only when something
// needs encoding.
func EncodeTopic(topic string) string {
	n := 0
	for i := 0; i < len(topic); i++ {
		if !plainTopicByte(topic[i]) {
			n++
		}
	}
	if n == 0 {
		return topic
	}
	b := make([]byte, 0, len(topic)+2*n)
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if plainTopicByte(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', upperHex[c>>4], upperHex[c&15])
	}
	return string(b)
}

func plainTopicByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}
