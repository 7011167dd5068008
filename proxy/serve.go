package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/limits"
	"trendgate/projection"
	"trendgate/rollup"
	"trendgate/upstream"
)

// serveAPI is the end of the chain: cache lookup (with one coalesced
// upstream fetch on a miss), projection and writing.
func (c *Chain) serveAPI(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	in := infoFrom(ctx)
	req := in.req

	// One clock read per request serves the whole hit path; a miss took
	// upstream time, so it reads the clock again.
	cctx, sp := c.startSpan(ctx, in, "cache lookup")
	var res cache.Result
	var err error
	bypass := req.Route != nil && req.Route.PassThrough()
	key := in.key
	if key == "" && !bypass {
		key = req.Key()
	}
	switch {
	case bypass:
		res, err = c.passThrough(cctx, in)
	case req.Route != nil:
		res, err = c.cache.GetWithin(cctx, key, req.Route.Stale, c.fetcher(in))
	default:
		res, err = c.cache.Get(cctx, key, c.fetcher(in))
	}
	if err == nil && !answers(req, res.Entry) {
		res, err = c.ownFill(cctx, in)
	}
	if in.traced {
		traceLookup(sp, res, err)
	}
	sp.End()
	now := in.start
	if res.Outcome == cache.Miss {
		now = c.clk.Now()
	}
	if err != nil {
		in.cache = "error"
		c.fail(w, r, err)
		return
	}
	in.cache = res.Outcome.String()
	if bypass {
		in.cache = "bypass"
	}
	e := res.Entry
	// While this response is written from e, an eviction of e does not
	// free its memory: the cache keeps counting it (cache.Entry.Pin).
	e.Pin()
	defer e.Unpin()
	if res.Outcome == cache.Miss && c.local != nil {
		c.local.CountPinned(e) // an answer the cache did not keep is alive as long
	}
	if e.Derived && (res.Outcome == cache.Hit || res.Outcome == cache.Miss) && now.Before(e.FreshUntil) {
		in.cache = "range" // cut from a wider answer: served without the upstream
	}
	status := cacheStatus(res, now)
	if bypass {
		status = statusBypass
	}
	if res.Outcome == cache.Miss && !res.Coalesced && !e.Derived && in.upstreamReason.Load() == &reasonWiden {
		// Cut from the week fetched for it: forwarded, and says how.
		status = statusWidened
	}
	// An error answer carries the Cache-Status too; write sets it (or
	// serializes it) with the others.
	fail := func(err error) {
		w.Header()["Cache-Status"] = status
		c.fail(w, r, err)
	}
	if e.Status == http.StatusNotFound {
		fail(api.ErrUnknownTopic)
		return
	}
	if e.Status == http.StatusBadRequest {
		fail(api.ErrUpstreamRejected)
		return
	}
	gz := acceptsGzip(firstValue(r.Header, "Accept-Encoding"))
	v := memoized(e, in.plan)
	if need := deriveBytes(e, v, in.plan, gz); need > 0 {
		// Deriving allocates bytes the cache does not count yet: take them
		// from the in-flight bound first (no other bytes are held here).
		wait, cancel := context.WithTimeout(ctx, in.set.ttl.FetchTimeout)
		grant, err := c.inflight.Acquire(wait, need)
		cancel()
		if err != nil {
			fail(err)
			return
		}
		if v == nil {
			if v, err = variantOf(e, in.plan, req); err != nil {
				grant.Release()
				fail(projectionError(err))
				return
			}
		}
		if inm := firstValue(r.Header, "If-None-Match"); gz && (inm == "" || !etagMatch(inm, v.etag[0])) {
			v.gzipped(e, in.plan) // made now, so that the grant covers it (a 304 sends none)
		}
		kept := memoized(e, in.plan) == v && (!gz || v.gz.Load() != nil || len(v.body) < gzipMinBytes)
		if kept && e.Counted() {
			// Stored on an entry the cache counts (held, or pinned by this
			// response): the bytes are the cache's now. Giving them back
			// before the write keeps a slow client from holding them.
			grant.Release()
		} else {
			defer grant.Release() // not kept, or counted nowhere: alive until written
		}
	}
	c.write(w, r, e, v, now, gz, status)
	if res.Outcome != cache.Miss && !c.servedFromCache.Load() {
		c.servedFromCache.Store(true)
	}
}

// fetcher returns the cache's fetch for in's request: a cut from a wider
// answer the cache holds (package rangecut), else one upstream call built
// from the canonical request only, turned into an entry with our
// freshness. A cold fetch is claimed on behalf of in's key for the fair
// share of the upstream budget; a background refresh on nobody's.
//
// A refunded request is not free: when every caller of the fill has left
// by the time the fetch returns (cache.Abandoned: the clients were
// answered 499 and their quota refunded, or were served a stale entry
// after stale_if_error_wait), the upstream calls it made were paid for all
// the same. They are counted for in's key, whose request started the fill
// (trendgate_upstream_calls_abandoned_total by its account, and the key's
// usage);
// the account's fair share counted them already, since a call is claimed
// for the account before it is sent.
//
// The function made per request holds only c and in (a hit never calls
// it); what it needs of in is read when it runs, and in does not change
// once the request is authenticated.
func (c *Chain) fetcher(in *info) cache.Fetcher {
	return func(ctx context.Context, background bool) (*cache.Entry, error) {
		return c.fetchFor(ctx, in, background)
	}
}

// fetchFor is in's fetcher (see fetcher).
func (c *Chain) fetchFor(ctx context.Context, in *info, background bool) (e *cache.Entry, err error) {
	req, set, keyID, account, p, usage := in.req, in.set, in.keyID, in.account, in.plan, in.usage
	reason := cache.ReasonFrom(ctx).String()
	if background && c.tracer != nil {
		var sp trace.Span
		ctx, sp = c.startFetchSpan(ctx, true, reason)
		defer func() { err = endFetchSpan(sp, e, err) }()
	}
	if err := c.refuseEarly(req); err != nil {
		return nil, err
	}
	if e := c.ranges.FromWider(ctx, req, &set.ttl, false); e != nil {
		return e, nil
	}
	start := c.clk.Now()
	fctx, sp := ctx, noSpan
	if !background && c.tracer != nil {
		fctx, sp = c.startFetchSpan(ctx, false, reason)
	}
	var sent int // calls made; Sent runs on this goroutine
	var abandoned func() bool
	if !background {
		// Nobody waits for a refresh from the start; a cold miss whose
		// clients all left gives up its place in the queue for a slot.
		abandoned = func() bool { return cache.Abandoned(ctx) }
	}
	e, err = c.fetch(fctx, in, req, set, start, upstream.Request{
		Endpoint:   req.Endpoint,
		Path:       req.UpstreamPath(),
		RawQuery:   req.UpstreamQuery(),
		Background: background,
		Reason:     reason,
		Account:    account,
		Weight:     p.upWeight,
		PerMinute:  p.upPerMin,
		Abandoned:  abandoned,
		Sent: func() {
			sent++
			now := c.clk.Now()
			c.act.UpstreamCall(now, req.Topic)
			if !background && usage != nil {
				usage.UpstreamCall(now)
			}
			if !background && c.rollups != nil && keyID != "" {
				c.rollups.Record(rollup.Event{Account: account, Key: keyID, Route: req.Label(), Upstream: 1})
			}
		},
	})
	err = endFetchSpan(sp, e, err)
	if !background {
		in.upstreamNanos.Store(int64(c.clk.Now().Sub(start)))
		c.metrics.countUpstream(keyID, account, err)
		if sent > 0 && cache.Abandoned(ctx) {
			c.metrics.abandoned(keyID, account, sent)
			if usage != nil {
				usage.UpstreamAbandoned(c.clk.Now(), sent)
			}
		}
	}
	if err != nil && ctx.Err() == nil {
		// Every failure a stale entry answers, a stale cut answers.
		if stale := c.ranges.FromWider(ctx, req, &set.ttl, true); stale != nil {
			return stale, nil
		}
	}
	return e, err
}

// fetch asks the upstream for req with ur (its widened week instead, when
// that applies and covers req) and turns the answer into an entry with our
// freshness. in (when the fetch is not a background refresh) records why
// the upstream was called, for the access log.
func (c *Chain) fetch(ctx context.Context, in *info, req api.Request, set *Settings, start time.Time, ur upstream.Request) (*cache.Entry, error) {
	if !ur.Background {
		if wide, ok := c.ranges.Widened(ctx, req, start); ok {
			in.upstreamReason.Store(&reasonWiden)
			if e, err := c.fetchWidened(ctx, req, wide, ur, set); e != nil || err != nil {
				return e, err
			}
		}
		in.upstreamReason.Store(reasonPtr(ur.Reason))
	}
	resp, err := c.up.Do(ctx, ur)
	if err != nil {
		return nil, err
	}
	c.ranges.Learn(ctx, req, resp.Status, resp.Body)
	now := c.received(resp)
	c.observeClock(req, resp, now)
	return entryOf(req, resp, now, set), nil
}

// ownFill answers in's window, which has only a start, with a fetch of its
// own (as a pass-through route's) when the entry under its key does not
// answer it (see answers), and stores the result in that entry's place.
func (c *Chain) ownFill(ctx context.Context, in *info) (cache.Result, error) {
	res, err := c.passThrough(ctx, in)
	if err == nil {
		_ = c.cache.Put(context.WithoutCancel(ctx), res.Entry)
	}
	return res, err
}

// fetchWidened fetches wide, the week to fetch instead of req (see
// rangecut.Cutter.Widened), from the upstream for the caller of req, and
// returns req's entry cut from it, or nil, nil when the week does not
// cover req (see rangecut.Cutter.CutWidened).
func (c *Chain) fetchWidened(ctx context.Context, req, wide api.Request, up upstream.Request, set *Settings) (*cache.Entry, error) {
	up.Path, up.RawQuery, up.Reason = wide.UpstreamPath(), wide.UpstreamQuery(), "widen"
	resp, err := c.up.Do(ctx, up)
	if err != nil {
		return nil, err
	}
	now := c.received(resp)
	c.observeClock(wide, resp, now)
	return c.ranges.CutWidened(ctx, req, entryOf(wide, resp, now, set), entryOf(req, resp, now, set), resp.Empty, &set.ttl), nil
}

// received is when resp arrived: the instant its entry's age counts from
// (not when the gateway got round to storing it, which may be later).
func (c *Chain) received(resp *upstream.Response) time.Time {
	if resp.Received.IsZero() {
		return c.clk.Now()
	}
	return resp.Received
}

// The access log's upstream_reason values, shared so that storing one
// allocates nothing.
var (
	reasonMiss, reasonRefresh, reasonWiden, reasonLease = "miss", "refresh", "widen", "lease_timeout"
)

func reasonPtr(r string) *string {
	switch r {
	case reasonRefresh:
		return &reasonRefresh
	case reasonLease:
		return &reasonLease
	}
	return &reasonMiss
}

// entryOf is the cache entry of resp, the upstream's answer to q received
// at now, fresh by q's class.
func entryOf(q api.Request, resp *upstream.Response, now time.Time, set *Settings) *cache.Entry {
	class := freshnessClass(q, resp.Status == http.StatusNotFound || resp.Empty)
	fresh := set.ttl.FreshUntil(class, now)
	if resp.Status == http.StatusBadRequest {
		fresh = now.Add(rejectedFor)
	}
	return &cache.Entry{
		Key:         q.Key(),
		Topic:       q.Topic,
		Status:      resp.Status,
		ContentType: resp.ContentType,
		Body:        resp.Body,
		Generated:   resp.Generated,
		Fetched:     now,
		FreshUntil:  fresh,
	}
}

// freshnessClass is what the freshness rules (cache.Config.FreshUntil)
// need of q's answer; negative marks an unknown-topic answer.
func freshnessClass(q api.Request, negative bool) cache.Class {
	class := cache.Class{Endpoint: q.Endpoint, Bucket: q.Bucket, End: q.WindowEnd(), Negative: negative}
	if q.Route != nil {
		class.Fresh = q.Route.Fresh
	}
	return class
}

// cost is q's price in tokens and quota units: a configured route's own
// cost, else the endpoint's from c.
func cost(q api.Request, c limits.Costs) int {
	if q.Route != nil {
		return max(q.Route.Cost, 1)
	}
	return c.For(q.Endpoint)
}

// Cache-Status values (RFC 9211), shared and never mutated.
var (
	statusHit          = []string{"trendgate; hit"}
	statusStale        = []string{"trendgate; hit; stale"}
	statusStaleIfError = []string{`trendgate; hit; stale; detail="upstream-error"`}
	statusMiss         = []string{"trendgate; fwd=miss; stored"}
	statusCollapsed    = []string{"trendgate; fwd=miss; collapsed"}
	statusRange        = []string{"trendgate; hit; detail=range"}
	statusRangeStale   = []string{"trendgate; hit; stale; detail=range"}
	statusWidened      = []string{"trendgate; fwd=miss; stored; detail=widened"}
	statusTooLarge     = []string{`trendgate; fwd=miss; detail="too-large"`}
)

func cacheStatus(res cache.Result, now time.Time) []string {
	// A window cut from a wider answer the gateway held: no upstream call.
	// Cut from a stale one (the upstream could not be asked), it is stale.
	if e := res.Entry; e != nil && e.Derived && (res.Outcome == cache.Hit || res.Outcome == cache.Miss) {
		if !now.Before(e.FreshUntil) {
			return statusRangeStale
		}
		return statusRange
	}
	switch res.Outcome {
	case cache.Hit:
		return statusHit
	case cache.Stale:
		return statusStale
	case cache.StaleIfError:
		return statusStaleIfError
	}
	if res.TooLarge {
		return statusTooLarge // served, not stored: larger than the cache's per-entry share
	}
	if res.Coalesced {
		return statusCollapsed
	}
	return statusMiss
}

// projectionError maps a projection failure: a would-be leak is our bug
// (500, fail closed); anything else means the cached body was not the shape
// we validated, which is an upstream problem (502).
func projectionError(err error) error {
	if errors.Is(err, projection.ErrLeak) {
		return err // toHTTP: 500
	}
	return api.ErrBadUpstream
}

// variant is one plan's representation of a cached entry: the projected
// bytes, their ETag, and a gzip copy made once on first demand. Variants
// are memoized on the entry, so cache hits never re-project or re-compress,
// and every byte they hold is charged to the cache's bound (Entry.StoreMemo,
// Entry.GrowMemo).
type variant struct {
	proj   *projection.Projection // what body was projected with; nil: the full body
	body   []byte
	etag   []string
	length []string

	gzMu sync.Mutex              // serializes making the gzip copy
	gz   atomic.Pointer[gzipped] // the kept gzip copy; nil until made (or when not kept)

	timed atomic.Pointer[timedHeaders] // the last Cache-Control and Age values
}

// gzipped is a variant's compressed copy; body nil when compressing does
// not pay.
type gzipped struct {
	body   []byte
	length []string
}

// timedHeaders are the Cache-Control and Age values for one pair of
// remaining-freshness and age seconds. They change at most once a second,
// so the hits of that second share one copy instead of formatting their
// own.
type timedHeaders struct {
	maxAge, age  int64
	cacheControl []string
	ageValue     []string
	// heads are the serialized fields of a 200 in this second, as last
	// made without and with gzip (see headBlock).
	heads [2]atomic.Pointer[servedHead]
}

// timedHeaders returns the header values for maxAge and age seconds.
func (v *variant) timedHeaders(maxAge, age int64) *timedHeaders {
	if t := v.timed.Load(); t != nil && t.maxAge == maxAge && t.age == age {
		return t
	}
	t := &timedHeaders{
		maxAge:       maxAge,
		age:          age,
		cacheControl: []string{"private, max-age=" + strconv.FormatInt(maxAge, 10)},
		ageValue:     []string{strconv.FormatInt(age, 10)},
	}
	v.timed.Store(t)
	return t
}

// fullVariant is the memo key of the unprojected variant shared by all
// full-data plans; a limited plan's variant is memoized under its planVariant.
type fullVariant struct{}

// planVariant is the memo key of a limited plan's variant. Keying by plan
// name, not by *Projection, keeps one variant per plan however often the
// configuration is reloaded: a variant projected by an older compile of the
// plan is replaced (and its bytes released) on the plan's next request.
type planVariant string

// gzipMinBytes is the smallest body worth compressing.
const gzipMinBytes = 1024

// variantOverhead approximates what a variant holds besides its bodies: the
// struct, its ETag and length strings, the memo's map node and the timed
// headers with their two serialized heads.
const variantOverhead = 1024

// deriveSlots bounds how many variants are derived (projected and hashed,
// or compressed) at once. The work is CPU-bound, so running more of it than
// there are CPUs only keeps more scratch buffers and compressor state (about
// 800 KB per gzip writer) alive together: 32 concurrent cold requests for
// 1.4 MB series held about 100 MB that way, beyond the cache's bound. Hits
// on memoized variants never take a slot.
var deriveSlots = make(chan struct{}, max(runtime.GOMAXPROCS(0), 1))

// variantKey returns the memo key of plan name's variant: fullVariant{} for
// a full-data plan, else planVariant(name). compile stores it in the plan,
// so hits do not box a string on each request.
func variantKey(name string, proj *projection.Projection) any {
	if proj == nil {
		return fullVariant{}
	}
	return planVariant(name)
}

// memoized returns plan p's variant memoized on e, or nil when it is still
// to be derived (never made, or projected by a plan compile a reload
// replaced).
func memoized(e *cache.Entry, p *plan) *variant {
	if old, found := e.Memo(p.memoKey); found && old.(*variant).proj == p.proj {
		return old.(*variant)
	}
	return nil
}

// deriveBytes estimates the bytes deriving plan p's response from e will
// allocate: 0 when v (p's memoized variant, nil if none) has all it needs,
// which is the case on every hit once a variant was made. A projection is
// at most the body; a gzip copy is charged half its input (the buffer grown
// while compressing and the kept copy; JSON and TSV compress far better).
func deriveBytes(e *cache.Entry, v *variant, p *plan, gz bool) int64 {
	var n, gzIn int64
	switch {
	case v == nil && p.proj != nil:
		n, gzIn = int64(len(e.Body))+variantOverhead, int64(len(e.Body))
	case v == nil:
		n, gzIn = variantOverhead, int64(len(e.Body))
	case gz && v.gz.Load() == nil:
		gzIn = int64(len(v.body))
	}
	if gz && gzIn >= gzipMinBytes {
		n += gzIn / 2
	}
	return n
}

// variantOf returns plan p's variant of e, the answer to q: projected by
// the plan's allowlist, or for a configured route by the route's own.
func variantOf(e *cache.Entry, p *plan, q api.Request) (*variant, error) {
	key := p.memoKey
	old, found := e.Memo(key)
	if found && old.(*variant).proj == p.proj {
		return old.(*variant), nil
	}
	deriveSlots <- struct{}{}
	defer func() { <-deriveSlots }()
	// Another request may have derived it while this one waited.
	if old, found = e.Memo(key); found && old.(*variant).proj == p.proj {
		return old.(*variant), nil
	}
	body := e.Body
	size := int64(variantOverhead)
	if p.proj != nil {
		var err error
		if q.Route != nil {
			body, err = projection.Data(e.Body, q.Route.LimitedFields)
		} else {
			body, err = p.proj.Apply(q.Endpoint, e.Body)
		}
		if err != nil {
			return nil, err
		}
		size += int64(cap(body))
	}
	sum := sha256.Sum256(body)
	v := &variant{
		proj:   p.proj,
		body:   body,
		etag:   []string{`"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`},
		length: []string{strconv.Itoa(len(body))},
	}
	if found { // projected by a plan compile a reload replaced
		e.ReplaceMemo(key, v, size)
		return v, nil
	}
	return e.StoreMemo(key, v, size).(*variant), nil
}

// gzipWriters reuses gzip writers: each holds about 800 KB of compressor
// state at BestCompression, which one per miss would turn into garbage.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestCompression)
	return zw
}}

// gzipped returns the compressed copy of the variant memoized on e under
// the memo key of plan p and its Content-Length value, or nil when the body
// is too small or does not shrink. The copy is made once and kept when the cache can charge it
// (Entry.GrowMemo); otherwise it serves this response only.
func (v *variant) gzipped(e *cache.Entry, p *plan) ([]byte, []string) {
	if g := v.gz.Load(); g != nil {
		return g.body, g.length
	}
	if len(v.body) < gzipMinBytes {
		return nil, nil
	}
	v.gzMu.Lock()
	defer v.gzMu.Unlock()
	if g := v.gz.Load(); g != nil {
		return g.body, g.length
	}
	deriveSlots <- struct{}{}
	defer func() { <-deriveSlots }()
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(&buf)
	_, _ = zw.Write(v.body)
	err := zw.Close()
	zw.Reset(io.Discard) // drop the reference to buf before pooling
	gzipWriters.Put(zw)
	g := &gzipped{}
	if err == nil && buf.Len() < len(v.body) {
		g.body = bytes.Clone(buf.Bytes()) // exactly sized: the buffer's spare capacity would be held too
		g.length = []string{strconv.Itoa(len(g.body))}
	}
	key := p.memoKey
	if cur, ok := e.Memo(key); ok && cur == v && e.GrowMemo(key, int64(cap(g.body))+64) {
		v.gz.Store(g)
	}
	return g.body, g.length
}

// Shared header values; never mutated.
var (
	ctJSON      = []string{"application/json; charset=utf-8"}
	ctTSV       = []string{"text/tab-separated-values; charset=utf-8"}
	encGzip     = []string{"gzip"}
	varyEnc     = []string{"Accept-Encoding"}
	nosniff     = []string{"nosniff"}
	modeLimited = []string{"limited"}
)

// write sends the variant with the caching headers, honouring
// If-None-Match (304), Accept-Encoding (gzip) and HEAD. gz says the
// request accepts gzip; status is the Cache-Status value.
//
// On a lane that takes fields serialized (fieldsWriter: the HTTP/1.1 and
// HTTP/2 lanes), a 200 writes its caching and content fields as one block
// made once per second for the variant (see headBlock), not through the
// header map: the same fields, the most a hit sends, for a fraction of the
// work per request.
func (c *Chain) write(w http.ResponseWriter, r *http.Request, e *cache.Entry, v *variant, now time.Time, gz bool, status []string) {
	in := infoFrom(r.Context())
	h := w.Header()
	t := v.timedHeaders(seconds(e.FreshUntil.Sub(now)), seconds(e.Age(now)))
	passThrough := in.req.Route != nil && in.req.Route.PassThrough()
	inm := firstValue(r.Header, "If-None-Match")
	notModified := inm != "" && etagMatch(inm, v.etag[0])
	body, length := v.body, v.length
	encoded := false
	if gz && !notModified {
		if zb, zLength := v.gzipped(e, in.plan); zb != nil {
			body, length, encoded = zb, zLength, true
		}
	}
	shape := headShape{encoded: encoded, limited: in.plan.proj != nil, tsv: in.req.Endpoint.Spec().TSV}
	if sw, ok := w.(*statusWriter); ok && !notModified && !passThrough && len(h["Vary"]) == 0 {
		fields := t.headBlock(v, status, shape)
		if sw.writeHeaderFields(http.StatusOK, fields, int64(len(body))) {
			if r.Method != http.MethodHead {
				_, _ = w.Write(body)
			}
			return
		}
	}
	t.eachField(v, status, shape, passThrough, !notModified, func(name string, value []string) {
		if name == "Vary" && len(h["Vary"]) > 0 {
			h.Add("Vary", value[0]) // after CORS's Vary: Origin
			return
		}
		h[name] = value
	})
	if notModified {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h["Content-Length"] = length
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// headShape is what a 200's serialized fields depend on besides the
// variant, the second and the Cache-Status.
type headShape struct {
	encoded bool // the gzip copy is sent
	limited bool // the key's plan is limited: X-Data-Mode
	tsv     bool // a TSV body, else JSON
}

// servedHead is a 200's fields serialized for one variant, second, Cache-Status
// and shape (see Chain.write).
type servedHead struct {
	status *string // the Cache-Status value's identity: the values are shared
	shape  headShape
	fields []byte
}

// eachField calls set with each caching field, in order, of an answer of
// v in t's second: Cache-Status, Etag, Vary, Cache-Control (no-store for
// a pass-through route), Age and X-Data-Mode; and, when body, the fields
// of a 200's body: X-Content-Type-Options, Content-Type and
// Content-Encoding. Both ways Chain.write sends them (the header map and
// headBlock) take them from here.
func (t *timedHeaders) eachField(v *variant, status []string, shape headShape, passThrough, body bool, set func(name string, value []string)) {
	set("Cache-Status", status)
	set("Etag", v.etag)
	set("Vary", varyEnc)
	if passThrough {
		set("Cache-Control", noStore)
	} else {
		set("Cache-Control", t.cacheControl)
	}
	set("Age", t.ageValue)
	if shape.limited {
		set("X-Data-Mode", modeLimited)
	}
	if !body {
		return
	}
	set("X-Content-Type-Options", nosniff)
	if shape.tsv {
		set("Content-Type", ctTSV)
	} else {
		set("Content-Type", ctJSON)
	}
	if shape.encoded {
		set("Content-Encoding", encGzip)
	}
}

// headBlock returns the fields a 200 of v carries in t's second, apart from
// the header map's and Content-Length, serialized (see eachField). The last
// block made for each encoding is kept, so the hits of a second share it.
func (t *timedHeaders) headBlock(v *variant, status []string, shape headShape) []byte {
	slot := &t.heads[0]
	if shape.encoded {
		slot = &t.heads[1]
	}
	if hd := slot.Load(); hd != nil && hd.status == &status[0] && hd.shape == shape {
		return hd.fields
	}
	b := make([]byte, 0, 256)
	t.eachField(v, status, shape, false, true, func(name string, value []string) {
		b = append(append(append(append(b, name...), ": "...), value[0]...), "\r\n"...)
	})
	slot.Store(&servedHead{status: &status[0], shape: shape, fields: b})
	return b
}

// firstValue is h.Get(key) for a key in canonical form, without
// canonicalizing it again: every lane stores request fields under their
// canonical names.
func firstValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// seconds rounds d down to whole seconds, never below zero.
func seconds(d time.Duration) int64 {
	if d < 0 {
		return 0
	}
	return int64(d / time.Second)
}

// etagMatch implements If-None-Match's weak comparison against one tag.
func etagMatch(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

// acceptsGzip reports whether an Accept-Encoding value allows gzip
// (a "gzip" or "*" coding without q=0).
func acceptsGzip(ae string) bool {
	for ae != "" {
		var part string
		part, ae, _ = strings.Cut(ae, ",")
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		coding = strings.TrimSpace(coding)
		if !strings.EqualFold(coding, "gzip") && coding != "*" {
			continue
		}
		q := strings.ReplaceAll(strings.ToLower(params), " ", "")
		if strings.HasPrefix(q, "q=0") && strings.Trim(strings.TrimPrefix(q, "q="), "0.") == "" {
			return false
		}
		return true
	}
	return false
}
