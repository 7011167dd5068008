// Package demo is an in-process imitation of the analytics upstream
// (LunarCrush API v4): the topics list, whatsup summaries, hourly and daily
// time series and the raw TSV downloads, with realistic magnitudes, account
// rate limits, x-rate-limit-* headers and switchable failure modes.
//
// It backs demo mode, every gateway test (it records each API request it
// receives, so tests can assert what reached the upstream) and the
// benchmarks. Data is a pure function of (seed, topic, bucket time, now):
// the same request at the same clock time yields byte-identical bodies, and
// Server.AnswerAt computes that body for any instant.
//
// Options can make the upstream differ from the gateway the way a real one
// might: how an absolute window's start and end select buckets, a clock
// ahead or behind, a current bucket that appears late, and closed hours
// whose values are still being revised.
//
// Nothing in the gateway imports demo except demo mode's wiring in cmd and
// the tests: the gateway talks to it over HTTP exactly as to the real
// upstream.
package demo

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"trendgate/internal/clock"
)

// ErrInvalidOptions is wrapped by New when an Options field is out of range.
var ErrInvalidOptions = errors.New("demo: invalid options")

// Messages the real upstream is known to send.
const (
	msgDemoMode    = "DEMO DATA MODE: you must have a LunarCrush subscription to unlock real data"
	msgNotFound    = "Invalid endpoint (2)"
	msgTopic404    = "Topic not found"
	msgRateMinute  = "Rate limit exceeded (minute)"
	msgRateDaily   = "Rate limit exceeded (daily)"
	msgServerError = "Internal server error"
)

// maxRecorded bounds the recorded requests; past it the oldest half is
// forgotten so long benchmarks do not grow without bound.
const maxRecorded = 100_000

// Reported limits for a dimension Options leaves unlimited.
const (
	unlimitedMinute = 1_000_000
	unlimitedDay    = 100_000_000
)

// Options configures a Server. The zero value is a usable, unauthenticated,
// unlimited upstream with 300 topics on the real clock.
type Options struct {
	// Seed selects the generated data; 0 means 1.
	Seed int64
	// Clock supplies "now" for windows, generated stamps and rate-limit
	// windows; nil means clock.Real{}.
	Clock clock.Clock
	// Topics is the size of the topics list (1..10000); 0 means 300.
	Topics int
	// APIKey, when non-empty, must arrive as "Authorization: Bearer
	// <APIKey>" or the request gets 401 with the DEMO DATA MODE message.
	// Empty means no authentication.
	APIKey string
	// Latency is waited (on the real clock) before answering each API
	// request; the wait ends early if the request context is done. 0 means
	// none.
	Latency time.Duration
	// PerMinute and PerDay are the account rate limit, in requests per
	// calendar minute and per UTC day of Clock; 0 means unlimited.
	PerMinute, PerDay int
	// UnknownTopic404 makes topics missing from the list answer 404
	// {"error":"Topic not found"}; false answers 200 with empty data.
	UnknownTopic404 bool
	// Control serves the /_demo/ control routes (fault, latency, requests,
	// count, reset); false treats those paths as ordinary unknown routes.
	Control bool

	// StartReading is how an absolute window's start (time-series start=)
	// selects buckets: "floor" also includes the bucket that holds start;
	// "ceil" only buckets that begin at or after start. "" means "floor".
	StartReading string
	// EndReading is how an absolute window's end (time-series end=)
	// selects buckets: "inclusive": buckets that begin at or before end
	// (t <= end); "exclusive": buckets that begin before end (t < end);
	// "floor_exclusive": end is first floored to its bucket, then
	// exclusive (t < floor(end)). "" means "inclusive". Either way no row
	// goes past the upstream's own current bucket.
	EndReading string
	// ClockOffset is added to Clock's time for everything the upstream
	// does: the current bucket, interval windows, generated stamps,
	// rate-limit windows. Negative: the upstream's clock is behind the
	// gateway's. 0: none. Recorded.At stays on Clock, without the offset.
	ClockOffset time.Duration
	// Lag hides the current bucket's row (hour or day) until Lag has
	// passed since the current hour began: a current bucket that appears
	// late. It applies to every time-series window and to the TSV
	// downloads. 0: shown at once; time.Hour (the maximum): never shown.
	Lag time.Duration
	// Revise makes the social counts of closed hourly buckets keep
	// changing for two hours after they close (late-counted
	// interactions), in steps of one minute, deterministically in (seed,
	// topic, bucket, now); daily rows, which sum hours, change with them.
	// false: closed buckets never change.
	Revise bool
	// IntervalDelay answers time series by interval (interval=1w, ...) as
	// they were IntervalDelay ago, rows, generated stamp and current
	// bucket alike, while absolute windows (start, end) are answered live:
	// an edge cache in front of the interval answers. 0: none.
	IntervalDelay time.Duration
}

// Recorded is one API request as the server received it. The zero value
// is an empty record.
type Recorded struct {
	Method      string      `json:"method"`       // request method
	EscapedPath string      `json:"escaped_path"` // r.URL.EscapedPath(), as sent
	RawQuery    string      `json:"raw_query"`    // r.URL.RawQuery, as sent
	Header      http.Header `json:"header"`       // a copy of the request headers
	At          time.Time   `json:"at"`           // Options.Clock time of arrival, without ClockOffset
}

// Server is the synthetic upstream. It implements http.Handler and is safe
// for concurrent use. Create it with New; the zero value is not usable.
type Server struct {
	opts  Options
	clock clock.Clock
	seed  uint64
	cat   *catalog
	v     variant // how windows are read and the newest data shown

	fault   atomic.Int32  // current Fault
	flap    atomic.Uint64 // requests seen under FaultFlap
	latency atomic.Int64  // time.Duration added before answering
	count   atomic.Int64  // API requests received

	closed    chan struct{} // closed by Close; releases hung requests
	closeOnce sync.Once

	mu          sync.Mutex // guards the fields below
	recorded    []Recorded
	minuteStart int64 // unix start of the current rate-limit minute
	minuteUsed  int
	dayStart    int64 // unix start of the current rate-limit day
	dayUsed     int
}

var _ http.Handler = (*Server)(nil)

// New validates opts and returns a Server.
func New(opts Options) (*Server, error) {
	switch {
	case opts.Topics < 0 || opts.Topics > maxTopics:
		return nil, fmt.Errorf("%w: topics %d not in 0..%d", ErrInvalidOptions, opts.Topics, maxTopics)
	case opts.PerMinute < 0 || opts.PerDay < 0:
		return nil, fmt.Errorf("%w: negative rate limit", ErrInvalidOptions)
	case opts.Latency < 0:
		return nil, fmt.Errorf("%w: negative latency", ErrInvalidOptions)
	}
	if opts.IntervalDelay < 0 {
		return nil, fmt.Errorf("%w: negative interval delay", ErrInvalidOptions)
	}
	v, msg := newVariant(opts.StartReading, opts.EndReading, opts.Lag, opts.Revise)
	if msg != "" {
		return nil, fmt.Errorf("%w: %s", ErrInvalidOptions, msg)
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Topics == 0 {
		opts.Topics = 300
	}
	seed := mix(uint64(opts.Seed))
	cat, err := newCatalog(seed, opts.Topics)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, clock: opts.Clock, seed: seed, cat: cat, v: v, closed: make(chan struct{})}
	s.latency.Store(int64(opts.Latency))
	return s, nil
}

// SetFault switches the failure mode for subsequent API requests and
// restarts the FaultFlap alternation.
func (s *Server) SetFault(f Fault) {
	s.flap.Store(0)
	s.fault.Store(int32(f))
}

// SetLatency sets the wait added before answering; d <= 0 means none.
func (s *Server) SetLatency(d time.Duration) { s.latency.Store(int64(max(d, 0))) }

// Requests returns a copy of the recorded API requests in arrival order
// (control routes are not recorded).
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Recorded, len(s.recorded))
	copy(out, s.recorded)
	return out
}

// Count returns how many API requests have arrived since New or Reset,
// counted on arrival (before latency, authentication or faults).
func (s *Server) Count() int { return int(s.count.Load()) }

// Reset forgets the recorded requests, the count and the rate-limit usage.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recorded = nil
	s.minuteUsed, s.dayUsed = 0, 0
	s.count.Store(0)
	s.flap.Store(0)
}

// Close releases every request hung by FaultHang or waiting out Latency.
// It is idempotent; the server keeps answering afterwards.
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.closed) }) }

// Topics returns the known topics in rank order.
func (s *Server) Topics() []string { return append([]string(nil), s.cat.names...) }

// now is the upstream's own time: Clock's plus ClockOffset.
func (s *Server) now() time.Time { return s.clock.Now().Add(s.opts.ClockOffset) }

// AnswerAt returns the status and body the server would answer r with at
// now, a time on Options.Clock (ClockOffset is added as for a live
// request, so a Recorded.At can be passed as is). It ignores latency, the
// account rate limit and the current fault, and records, counts and spends
// nothing; authentication still applies. Only API routes are answered: a
// /_demo/ path gets the API's 404. A HEAD request gets an empty body.
func (s *Server) AnswerAt(r *http.Request, now time.Time) (status int, body []byte) {
	now = now.Add(s.opts.ClockOffset)
	w := &answerWriter{header: http.Header{}}
	u := s.unspent(now.Unix())
	if !s.authorized(r) {
		s.writeError(w, r, http.StatusUnauthorized, msgDemoMode, u, now)
	} else {
		s.serveAPI(w, r, r.URL.EscapedPath(), now, u)
	}
	return w.status, w.body
}

// answerWriter is the http.ResponseWriter behind AnswerAt.
type answerWriter struct {
	header http.Header
	status int // 0 until WriteHeader or Write
	body   []byte
}

func (w *answerWriter) Header() http.Header { return w.header }

func (w *answerWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *answerWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, b...)
	return len(b), nil
}

// usage is a snapshot of the account rate-limit state.
type usage struct {
	minuteLimit, minuteUsed int
	minuteReset             int64
	dayLimit, dayUsed       int
	dayReset                int64
}

// roll moves the rate-limit windows to now; s.mu must be held.
func (s *Server) roll(now int64) {
	if m := alignDown(now, 60); m != s.minuteStart {
		s.minuteStart, s.minuteUsed = m, 0
	}
	if d := alignDown(now, day); d != s.dayStart {
		s.dayStart, s.dayUsed = d, 0
	}
}

// snapshot returns the usage; s.mu must be held.
func (s *Server) snapshot() usage {
	return s.limited(usage{
		minuteUsed: s.minuteUsed, minuteReset: s.minuteStart + 60,
		dayUsed: s.dayUsed, dayReset: s.dayStart + day,
	})
}

// unspent is the usage at now of an account that has spent nothing; it
// reads no server state.
func (s *Server) unspent(now int64) usage {
	return s.limited(usage{minuteReset: alignDown(now, 60) + 60, dayReset: alignDown(now, day) + day})
}

// limited fills in u's limits: the configured ones, or the reported
// stand-ins for an unlimited dimension.
func (s *Server) limited(u usage) usage {
	u.minuteLimit, u.dayLimit = s.opts.PerMinute, s.opts.PerDay
	if u.minuteLimit == 0 {
		u.minuteLimit = unlimitedMinute
	}
	if u.dayLimit == 0 {
		u.dayLimit = unlimitedDay
	}
	return u
}

// peek returns the usage at now without spending any.
func (s *Server) peek(now int64) usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(now)
	return s.snapshot()
}

// take spends one request at now. It returns the 429 message ("" when
// allowed) and the usage after the request.
func (s *Server) take(now int64) (string, usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(now)
	switch {
	case s.opts.PerDay > 0 && s.dayUsed >= s.opts.PerDay:
		return msgRateDaily, s.snapshot()
	case s.opts.PerMinute > 0 && s.minuteUsed >= s.opts.PerMinute:
		return msgRateMinute, s.snapshot()
	}
	s.minuteUsed++
	s.dayUsed++
	return "", s.snapshot()
}

func (s *Server) record(r *http.Request, now time.Time) {
	rec := Recorded{
		Method:      r.Method,
		EscapedPath: r.URL.EscapedPath(),
		RawQuery:    r.URL.RawQuery,
		Header:      r.Header.Clone(),
		At:          now,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.recorded) >= maxRecorded {
		s.recorded = append(s.recorded[:0], s.recorded[maxRecorded/2:]...)
	}
	s.recorded = append(s.recorded, rec)
}

// ServeHTTP answers one request: control routes when enabled, otherwise
// the API in this order: count and record, latency, authentication, fault,
// account rate limit, routing. Everything after recording runs on the
// upstream's own time, Clock's plus ClockOffset.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	if s.opts.Control && strings.HasPrefix(path, "/_demo/") {
		s.serveControl(w, r, path)
		return
	}
	s.count.Add(1)
	s.record(r, s.clock.Now())
	if d := time.Duration(s.latency.Load()); d > 0 && !s.wait(r.Context(), d) {
		return
	}
	now := s.now()
	if !s.authorized(r) {
		s.writeError(w, r, http.StatusUnauthorized, msgDemoMode, s.peek(now.Unix()), now)
		return
	}
	if s.serveFault(w, r, now) {
		return
	}
	msg, u := s.take(now.Unix())
	if msg != "" {
		s.writeError(w, r, http.StatusTooManyRequests, msg, u, now)
		return
	}
	s.serveAPI(w, r, path, now, u)
}

// wait blocks for d, or until ctx is done (false) or the server closes.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.closed:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Server) authorized(r *http.Request) bool {
	if s.opts.APIKey == "" {
		return true
	}
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return false
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(token), []byte(s.opts.APIKey)) == 1
}

// serveFault answers according to the current fault and reports whether
// it did.
func (s *Server) serveFault(w http.ResponseWriter, r *http.Request, now time.Time) bool {
	switch Fault(s.fault.Load()) {
	case FaultServerError:
		s.writeError(w, r, http.StatusInternalServerError, msgServerError, s.peek(now.Unix()), now)
	case FaultRateLimit:
		u := s.peek(now.Unix())
		u.minuteUsed = u.minuteLimit
		s.writeError(w, r, http.StatusTooManyRequests, msgRateMinute, u, now)
	case FaultGarbage:
		s.writeFaultBody(w, []byte("<html><body>\x00\x1f upstream garbage {\"data\": [</body>"))
	case FaultWrongShape:
		s.writeFaultBody(w, []byte(`{"status":"ok","data":{"message":"wrong shape","items":1}}`+"\n"))
	case FaultOversize:
		writeOversize(w)
	case FaultHang:
		select {
		case <-r.Context().Done():
		case <-s.closed:
			s.writeError(w, r, http.StatusServiceUnavailable, "demo server closed", s.peek(now.Unix()), now)
		}
	case FaultFlap:
		if s.flap.Add(1)%2 == 0 {
			return false
		}
		s.writeError(w, r, http.StatusInternalServerError, msgServerError, s.peek(now.Unix()), now)
	case FaultReset:
		resetConn(w)
	default:
		return false
	}
	return true
}

func (s *Server) writeFaultBody(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// oversizeBytes is the size of a FaultOversize body: above the gateway's
// 8 MiB cap and the brief's 9 MiB line.
const oversizeBytes = 9*1024*1024 + 512*1024

func writeOversize(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	item := []byte(`{"topic":"padding","title":"` + strings.Repeat("x", 200) + `","topic_rank":1},`)
	chunk := make([]byte, 0, 64*1024)
	for len(chunk)+len(item) <= cap(chunk) {
		chunk = append(chunk, item...)
	}
	if _, err := w.Write([]byte(`{"data":[`)); err != nil {
		return
	}
	for n := 0; n < oversizeBytes; n += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
	_, _ = w.Write([]byte(`{"topic":"end"}]}`))
}

// resetConn drops the connection without a response. Writers that cannot
// be hijacked (HTTP/2, recorders) are aborted with http.ErrAbortHandler,
// which net/http turns into a reset stream or closed connection.
func resetConn(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST instead of FIN
	}
	_ = conn.Close()
}

// endpoint identifies an API route.
type endpoint int

const (
	epNone endpoint = iota
	epList
	epWhatsup
	epSeries
	epTSV
	epCoins    // GET /api4/public/coins/list/v1
	epPosts    // GET /api4/public/topic/:topic/posts/v1
	epCreators // GET /api4/public/creators/list/v1
)

// route matches the escaped path byte for byte and returns the endpoint
// with its still-escaped topic segment and TSV metric.
func route(path string) (ep endpoint, topicSeg, metric string) {
	switch path {
	case "/api4/public/topics/list/v1":
		return epList, "", ""
	case "/api4/public/coins/list/v1":
		return epCoins, "", ""
	case "/api4/public/creators/list/v1":
		return epCreators, "", ""
	}
	segs := strings.Split(path, "/")
	switch {
	case len(segs) == 7 && segs[0] == "" && segs[1] == "api4" && segs[2] == "public" &&
		segs[3] == "topic" && segs[4] != "" && segs[6] == "v1":
		switch segs[5] {
		case "whatsup":
			return epWhatsup, segs[4], ""
		case "time-series":
			return epSeries, segs[4], ""
		case "posts":
			return epPosts, segs[4], ""
		}
	case len(segs) == 5 && segs[0] == "" && segs[1] == "topic" && segs[2] != "" && segs[3] == "time-series":
		m, ok := strings.CutSuffix(segs[4], ".tsv")
		if _, known := tsvMetrics[m]; ok && known {
			return epTSV, segs[2], m
		}
	}
	return epNone, "", ""
}

// bufPool recycles response buffers and row slices.
var bufPool = sync.Pool{New: func() any { return new(renderBuf) }}

type renderBuf struct {
	b      []byte
	rows   []sample
	spikes []float64
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, path string, now time.Time, u usage) {
	ep, seg, metric := route(path)
	if ep == epNone {
		s.writeError(w, r, http.StatusNotFound, msgNotFound, u, now)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		s.writeError(w, r, http.StatusMethodNotAllowed, "Method not allowed", u, now)
		return
	}
	var topic string
	var t *topicInfo
	if ep != epList && ep != epCoins && ep != epCreators {
		var err error
		if topic, err = url.PathUnescape(seg); err != nil {
			s.writeError(w, r, http.StatusBadRequest, "Invalid topic", u, now)
			return
		}
		if t = s.cat.byName[topic]; t == nil && s.opts.UnknownTopic404 {
			s.writeError(w, r, http.StatusNotFound, msgTopic404, u, now)
			return
		}
	}
	rb := bufPool.Get().(*renderBuf)
	defer bufPool.Put(rb)
	b := rb.b[:0]
	unixNow := now.Unix()
	ctype := "application/json; charset=utf-8"
	var generated int64
	switch ep {
	case epList:
		generated = s.generated(unixNow, "list", 60, 1)
		b = appendList(b, s.cat, unixNow)
	case epWhatsup:
		// Summaries are regenerated hourly and lag the other endpoints.
		generated = s.generated(unixNow, "whatsup "+topic, 3600, 60)
		b = appendWhatsup(b, topic, t, generated)
	case epSeries:
		q, msg := parseSeriesQuery(r.URL.RawQuery)
		if msg != "" {
			s.writeError(w, r, http.StatusBadRequest, msg, u, now)
			return
		}
		if !q.hasStart && !q.hasEnd && s.opts.IntervalDelay > 0 {
			now = now.Add(-s.opts.IntervalDelay)
			unixNow = now.Unix()
		}
		generated = s.generated(unixNow, "series "+topic, 60, 1)
		win := resolveWindow(now, generated, q, s.v)
		if win.start >= win.end {
			s.writeError(w, r, http.StatusBadRequest, "start must be before end", u, now)
			return
		}
		rows := rb.rows[:0]
		if t != nil {
			rows, rb.spikes = t.rows(win, now, rows, rb.spikes)
		}
		rb.rows = rows
		b = appendSeries(b, topic, t, win, generated, rows)
	case epCoins:
		q, msg := parseCoinsQuery(r.URL.RawQuery)
		if msg != "" {
			s.writeError(w, r, http.StatusBadRequest, msg, u, now)
			return
		}
		// The v1 lists are heavily cached upstream, up to an hour behind.
		generated = s.generated(unixNow, "coins", 3600, 60)
		b = appendCoins(b, s.cat.coins(s.seed, generated), q, generated)
	case epCreators:
		generated = s.generated(unixNow, "creators", 3600, 60)
		b = appendCreators(b, s.seed, generated, generated)
	case epPosts:
		generated = s.generated(unixNow, "posts "+topic, 300, 30)
		b = appendPosts(b, s.seed, topic, t, generated, generated)
	case epTSV:
		ctype = "text/tab-separated-values"
		generated = s.generated(unixNow, "tsv "+topic, 60, 1)
		b = appendTSV(b, metric, t, tsvWindow(now, s.v), now)
	}
	rb.b = b
	h := w.Header()
	setLimitHeaders(h, u)
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "s-max-age=86400")
	h.Set("X-Lunar-Generated", strconv.FormatInt(generated, 10))
	h.Set("X-Lunar-Age", strconv.FormatInt(unixNow-generated, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

// generated is when the data for what was last regenerated at now: on a
// fixed schedule every period seconds, at a per-(seed, what) offset, and at
// least minAge seconds ago. It never decreases as now advances, and the
// age now - generated lies in [minAge, minAge+period).
func (s *Server) generated(now int64, what string, period, minAge int64) int64 {
	off := int64(hash3(s.seed, fnv64(what), tagAge) % uint64(period))
	return alignDown(now-minAge-off, period) + off
}

// seriesQuery is a parsed time-series query.
type seriesQuery struct {
	bucket           int64
	interval         string
	start, end       int64
	hasStart, hasEnd bool
}

// parseSeriesQuery parses bucket, interval, start and end; other
// parameters are ignored, as the real API does. A non-empty msg is the
// client-facing reason for a 400.
func parseSeriesQuery(raw string) (q seriesQuery, msg string) {
	q = seriesQuery{bucket: hour, interval: "1w"}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, "Invalid query string"
	}
	switch b := vals.Get("bucket"); b {
	case "", "hour", "hours":
	case "day", "days":
		q.bucket = day
	default:
		return q, fmt.Sprintf("Invalid bucket %q: use hour or day", b)
	}
	if iv, ok := vals["interval"]; ok {
		if _, known := intervalDays[iv[0]]; !known {
			return q, fmt.Sprintf("Invalid interval %q: use 1d, 1w, 1m, 3m, 6m, 1y or all", iv[0])
		}
		q.interval = iv[0]
	}
	if v, ok := vals["start"]; ok {
		if q.start, ok = parseUnix(v[0]); !ok {
			return q, fmt.Sprintf("Invalid start %q: want unix seconds", v[0])
		}
		q.hasStart = true
	}
	if v, ok := vals["end"]; ok {
		if q.end, ok = parseUnix(v[0]); !ok {
			return q, fmt.Sprintf("Invalid end %q: want unix seconds", v[0])
		}
		q.hasEnd = true
	}
	return q, ""
}

// parseUnix accepts plain decimal unix seconds (1 to 11 digits).
func parseUnix(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 11 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

func setLimitHeaders(h http.Header, u usage) {
	h.Set("X-Rate-Limit-Minute", strconv.Itoa(u.minuteLimit))
	h.Set("X-Rate-Limit-Minute-Remaining", strconv.Itoa(max(u.minuteLimit-u.minuteUsed, 0)))
	h.Set("X-Rate-Limit-Minute-Reset", strconv.FormatInt(u.minuteReset, 10))
	h.Set("X-Rate-Limit-Day", strconv.Itoa(u.dayLimit))
	h.Set("X-Rate-Limit-Day-Remaining", strconv.Itoa(max(u.dayLimit-u.dayUsed, 0)))
	h.Set("X-Rate-Limit-Day-Reset", strconv.FormatInt(u.dayReset, 10))
}

// writeError writes the upstream's error shape {"error":"..."} with the
// rate-limit and x-lunar headers.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, status int, msg string, u usage, now time.Time) {
	body := appendString([]byte(`{"error":`), msg)
	body = append(body, "}\n"...)
	h := w.Header()
	setLimitHeaders(h, u)
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "s-max-age=0")
	h.Set("X-Lunar-Generated", strconv.FormatInt(now.Unix(), 10))
	h.Set("X-Lunar-Age", "0")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// serveControl answers the /_demo/ routes. They are neither counted nor
// recorded, and need no API key.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request, path string) {
	writeJSON := func(status int, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			status, b = http.StatusInternalServerError, []byte(`{"error":"encoding failed"}`)
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		_, _ = w.Write(append(b, '\n'))
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(http.StatusMethodNotAllowed, map[string]string{"error": "Method not allowed"})
		return
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeJSON(http.StatusBadRequest, map[string]string{"error": "Invalid query string"})
		return
	}
	switch path {
	case "/_demo/fault":
		if mode, ok := q["mode"]; ok {
			f, err := ParseFault(mode[0])
			if err != nil {
				writeJSON(http.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
			s.SetFault(f)
		}
		writeJSON(http.StatusOK, map[string]string{"fault": Fault(s.fault.Load()).String()})
	case "/_demo/latency":
		if d, ok := q["d"]; ok {
			v, err := time.ParseDuration(d[0])
			if err != nil || v < 0 {
				writeJSON(http.StatusBadRequest, map[string]string{"error": "d must be a non-negative duration such as 200ms"})
				return
			}
			s.SetLatency(v)
		}
		writeJSON(http.StatusOK, map[string]string{"latency": time.Duration(s.latency.Load()).String()})
	case "/_demo/requests":
		writeJSON(http.StatusOK, s.Requests())
	case "/_demo/count":
		writeJSON(http.StatusOK, map[string]int{"count": s.Count()})
	case "/_demo/reset":
		s.Reset()
		writeJSON(http.StatusOK, map[string]bool{"reset": true})
	case "/_demo/":
		writeJSON(http.StatusOK, map[string]any{"routes": controlRoutes, "faults": FaultNames()})
	default:
		writeJSON(http.StatusNotFound, map[string]any{"error": "unknown control route", "routes": controlRoutes})
	}
}

// controlRoutes describes the /_demo/ routes, for GET /_demo/ and for an
// unknown control route.
var controlRoutes = map[string]string{
	"GET /_demo/":                "this list",
	"GET /_demo/fault?mode=NAME": "switch the failure mode (see faults); without mode=, show it",
	"GET /_demo/latency?d=200ms": "set the latency added to each answer; without d=, show it",
	"GET /_demo/requests":        "the API requests received, as recorded",
	"GET /_demo/count":           "how many API requests were received",
	"GET /_demo/reset":           "forget recorded requests, counts and account limit usage",
}
