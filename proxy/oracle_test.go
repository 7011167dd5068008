package proxy_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
	"trendgate/projection"
	"trendgate/upstream"
)

// The differential oracle of issue 26 (point 4; docs/design.md, "Truth
// before economy"): a seeded, bounded random driver sends the same requests
// to the gateway and, through upstreamRef, straight to the upstream, and holds
// every 200 the gateway sends to the upstream's own answer to that client
// request at the instant the gateway's data was fetched.
//
// The rule. Gateway and demo upstream share one fake clock that moves in
// whole seconds (the upstream may be offset from it). Every answer carries
// Age, whole seconds since the data was fetched (a range cut: since the
// wider answer was). For a 200, τ = gateway now − Age, and the upstream's
// answer to the client's own request-target (its query exactly as sent)
// at τ is the truth: the series' data rows, the list and whatsup bodies,
// the TSV bytes (compareBodies), after the limited plan's projection for a
// limited key. A 304 must carry the ETag of a passing 200 for that request
// and key at that moment; a HEAD the headers of the GET, without a body;
// a gzip body is compared decompressed. A non-200 where the upstream
// answered 200 is a refusal: it fails only as a 5xx while the upstream is
// healthy, or as a 400 the gateway does not document (documentedRefusal),
// and every refusal is counted in the run's summary.
//
// Run it: go test -run Oracle ./proxy/ (one seed, oracleSteps steps per
// variant), or with -oracle.full (more seeds, 5,000 steps each).

var (
	oracleFull       = flag.Bool("oracle.full", false, "run the differential oracle long: 3 seeds × 5,000 steps per variant")
	oracleStepsFlag  = flag.Int("oracle.steps", 0, "steps per oracle run (0: 80, or 5,000 with -oracle.full)")
	oracleSeedOffset = flag.Uint64("oracle.seed", 0, "added to every oracle seed, to explore other runs")
)

// Steps per run.
const (
	oracleSteps     = 80
	oracleFullSteps = 5000
)

// oracleVariant is one upstream (and gateway) setup the oracle runs
// against.
type oracleVariant struct {
	name string
	// demo sets the upstream variant's options; nil: the default upstream.
	demo func(*demo.Options)
	// offset is the upstream's clock offset (demo.Options.ClockOffset):
	// windows are placed relative to both clocks.
	offset time.Duration
	// mutate changes every gateway's config after the oracle's own
	// settings; nil: none.
	mutate func(*config.Config)
	// cluster runs two gateways on one Redis (cache tier shared) and
	// alternates between them.
	cluster bool
	// restart restarts a gateway from its snapshot now and then.
	restart bool
	// gaps picks only topics with missing hours in the run's first week.
	gaps bool
	// want lists paths (pathCounts labels) a run must take, beyond
	// oracleAlwaysWant.
	want []string
}

// oracleAlwaysWant are the paths every run takes whatever the gateway's
// caching decisions (a run that does not has not tested what it claims).
var oracleAlwaysWant = []string{"cache: miss", "cache: hit", "via: gzip", "via: HEAD", "via: 304"}

// oracleSoftWant are paths reported when never taken, without failing:
// whether the gateway stales, cuts or coalesces there is its decision
// (a fixed gateway may rightly refuse to cut where the upstream's reading
// of a window is unknown), and a short run may simply not line them up.
var oracleSoftWant = []string{"cache: miss-widened", "cache: coalesced", "cache: stale", "cache: stale-if-error", "cache: range", "tier: snapshot"}

func oracleVariants() []oracleVariant {
	reading := func(start, end string) func(*demo.Options) {
		return func(o *demo.Options) { o.StartReading, o.EndReading = start, end }
	}
	offset := func(d time.Duration) func(*demo.Options) {
		return func(o *demo.Options) { o.ClockOffset = d }
	}
	stated := func(start, end string) func(*config.Config) {
		return func(c *config.Config) { c.Upstream.WindowReading = upstream.WindowReading{Start: start, End: end} }
	}
	const minutes, days = 7 * time.Minute, 2*24*time.Hour + 5*time.Minute
	return []oracleVariant{
		// The demo's defaults: start floor, end inclusive, one clock.
		{name: "default", restart: true},
		{name: "cluster", cluster: true, restart: true, want: []string{"tier: redis"}},
		// Readings of the bounds, learned by the gateway.
		{name: "start-ceil", demo: reading("ceil", "")},
		{name: "end-exclusive", demo: reading("", "exclusive")},
		{name: "end-floor-exclusive", demo: reading("", "floor_exclusive")},
		{name: "start-ceil-end-exclusive", demo: reading("ceil", "exclusive"), restart: true},
		// Readings stated in upstream.window_reading: right, and wrong
		// (the gateway's evidence must win over a wrong statement).
		{name: "stated-ceil-floor-exclusive", demo: reading("ceil", "floor_exclusive"), mutate: stated("ceil", "floor_exclusive")},
		{name: "stated-floor-inclusive", mutate: stated("floor", "inclusive"), restart: true},
		{name: "stated-wrong", demo: reading("ceil", "floor_exclusive"), mutate: stated("floor", "inclusive")},
		// The upstream's clock ahead of and behind the gateway's.
		{name: "clock-ahead-minutes", demo: offset(minutes), offset: minutes},
		{name: "clock-behind-minutes", demo: offset(-minutes), offset: -minutes},
		{name: "clock-ahead-days", demo: offset(days), offset: days},
		{name: "clock-behind-days", demo: offset(-days), offset: -days},
		// A current bucket that appears 10 minutes late.
		{name: "lag", demo: func(o *demo.Options) { o.Lag = 10 * time.Minute }},
		// Closed hours whose counts change for two hours (answers differ
		// between two calls).
		{name: "revise", demo: func(o *demo.Options) { o.Revise = true }, restart: true},
		// Interval answers from an edge cache 5 minutes behind, absolute
		// windows live: a cut from an interval answer must follow the
		// rows and generated time it carries.
		{name: "interval-edge-cache", demo: func(o *demo.Options) { o.IntervalDelay = 5 * time.Minute }},
		// Only topics with missing hours in the week before the start.
		{name: "gaps", gaps: true},
	}
}

func TestOracle(t *testing.T) {
	seeds, steps := []uint64{1}, oracleSteps
	if *oracleFull {
		seeds, steps = []uint64{1, 2, 3}, oracleFullSteps
	}
	if *oracleStepsFlag > 0 {
		steps = *oracleStepsFlag
	}
	for i := range seeds {
		seeds[i] += *oracleSeedOffset
	}
	for _, v := range oracleVariants() {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", v.name, seed), func(t *testing.T) {
				t.Parallel()
				runOracle(t, v, seed, steps)
			})
		}
	}
}

// oracleConfig is what every oracle gateway runs with on top of
// baseConfig: client limits out of the way (a 429 tests nothing here), a
// breaker that closes again within a minute of a fault, no access log.
func oracleConfig(c *config.Config) {
	for _, name := range []string{config.PlanFull, config.PlanLimited} {
		p := c.Plans[name]
		p.PerSecond, p.Burst, p.Daily, p.Monthly = 100000, 100000, 1<<40, 1<<40
		c.Plans[name] = p
	}
	c.Upstream.Breaker = upstream.BreakerConfig{Failures: 3, Backoff: 5 * time.Second, MaxBackoff: time.Minute}
	c.Upstream.Timeout, c.Upstream.ResponseHeaderTimeout = 10*time.Second, 10*time.Second
	noAccess := false
	c.Log.Access = &noAccess
}

// oracleRecovery is how long after a fault ends the upstream still counts
// as unhealthy: the breaker's longest backoff, and the reset of an
// upstream 429 (the next minute boundary), have passed by then.
const oracleRecovery = 2 * time.Minute

// oracleRun is one variant × seed.
type oracleRun struct {
	t      *testing.T
	v      oracleVariant
	seed   uint64
	rnd    *rand.Rand
	clk    *clock.Fake
	start  time.Time // the clock's start
	up     *demo.Server
	tap    *gatewaytest.CountingTap
	ref    *gatewaytest.UpstreamRef
	nodes  []*gatewaytest.OracleNode
	full   string
	lim    string
	proj   *projection.Projection // the limited plan's projection
	topics []string

	step        int
	fault       demo.Fault
	faultEnds   int       // the step at which the fault is lifted
	healthyFrom time.Time // the upstream counts as healthy from then on
	retired     float64   // upstream answers read by gateways since restarted

	seen     []seenReq         // recent requests answered with a passing 200, to revalidate
	own      []map[string]bool // per node: canonical keys it fetched or cut since it started
	restored []map[string]bool // per node: keys its snapshot may have brought back

	paths    gatewaytest.CountTable // every path an answer took
	refusals gatewaytest.CountTable // non-200 answers, by status, code and whether they failed
	failures gatewaytest.CountTable // failed checks by request kind, path and plan
	nfail    int
}

// maxDetailed bounds the failures printed in full per run; the rest are
// counted in the summary.
const maxDetailed = 8

func runOracle(t *testing.T, v oracleVariant, seed uint64, steps int) {
	r := &oracleRun{
		t: t, v: v, seed: seed,
		rnd:      rand.New(rand.NewPCG(seed, 0x5eed0f0aac1e)),
		paths:    gatewaytest.CountTable{},
		refusals: gatewaytest.CountTable{},
		failures: gatewaytest.CountTable{},
	}
	// A start in another hour and minute per seed; whole seconds only.
	start := gatewaytest.Now.Add(time.Duration(r.rnd.Int64N(7*24*3600)) * time.Second)
	r.clk, r.start = clock.NewFake(start), start
	dopts := demo.Options{Clock: r.clk, APIKey: gatewaytest.UpstreamKey, Seed: int64(seed)}
	if v.demo != nil {
		v.demo(&dopts)
	}
	up, err := demo.New(dopts)
	if err != nil {
		t.Fatal(err)
	}
	r.up = up
	r.tap = &gatewaytest.CountingTap{Next: up}
	upSrv := httptest.NewServer(r.tap)
	t.Cleanup(func() { up.Close(); upSrv.Close() })
	r.ref = &gatewaytest.UpstreamRef{Up: up}
	r.pickTopics()

	r.full, r.lim = gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	n := 1
	var prefix, redisURL string
	if v.cluster {
		n = 2
		c0 := redistest.Client(t, gatewaytest.SharedRedis) // skips without Redis, fails with CI=true
		c1 := gatewaytest.NewRedisDB(t, gatewaytest.SharedRedis, 1)
		prefix = redistest.Prefix(t, c0, c1)
		redisURL = "redis://" + gatewaytest.SharedRedis + "/0" // cache tier: DB 1
	}
	dir := t.TempDir()
	for i := range n {
		cfg := gatewaytest.BaseConfig(upSrv.URL, r.full, r.lim)
		oracleConfig(cfg)
		if v.restart {
			cfg.Cache.PersistPath = filepath.Join(dir, fmt.Sprintf("node%d.snap", i))
		}
		if v.cluster {
			cfg.Redis.URL, cfg.Redis.Prefix, cfg.Redis.Timeout = redisURL, prefix, time.Second
		}
		if v.mutate != nil {
			v.mutate(cfg)
		}
		if i == 0 {
			r.proj, err = projection.Compile(cfg.Plans[config.PlanLimited].Projection())
			if err != nil {
				t.Fatal(err)
			}
		}
		r.nodes = append(r.nodes, gatewaytest.StartOracleNode(t, r.clk, cfg))
		r.own = append(r.own, map[string]bool{})
		r.restored = append(r.restored, map[string]bool{})
	}

	for r.step = 0; r.step < steps; r.step++ {
		r.advance()
		r.faults(steps)
		// At least one restart per run, in its middle, and more now and then.
		if v.restart && (r.rnd.IntN(100) < 3 || r.step == steps/2 && r.paths["event: restart"] == 0) {
			r.restartNode(r.rnd.IntN(len(r.nodes)))
		}
		r.once()
		r.quiesce()
	}
	r.up.SetFault(demo.FaultNone)
	r.report()
}

// pickTopics chooses the run's few topics (few, so answers are reused):
// plain, hashtag, cashtag and multi-word names, an asset, and a topic the
// upstream does not know; in the gaps variant, topics whose last week has
// missing hours instead.
func (r *oracleRun) pickTopics() {
	all := r.up.Topics()
	if r.v.gaps {
		for _, tp := range all {
			if len(r.topics) == 5 {
				break
			}
			week := "/api4/public/topic/" + api.EncodeTopic(tp) + "/time-series/v1?interval=1w"
			status, body := r.ref.AnswerAt(week, r.clk.Now())
			var sb gatewaytest.SeriesBody
			if status != http.StatusOK || json.Unmarshal(body, &sb) != nil {
				r.t.Fatalf("%s: %d %s", week, status, body)
			}
			// A week of hours from a UTC midnight through the current hour.
			now := r.clk.Now().Add(r.v.offset).Unix()
			full := (now-now%3600-(now-7*86400)/86400*86400)/3600 + 1
			if int64(len(sb.Data)) < full {
				r.topics = append(r.topics, tp)
			}
		}
		if len(r.topics) == 0 {
			r.t.Fatal("no topic has a missing hour in its last week")
		}
		r.t.Logf("topics with missing hours: %q", r.topics)
		return
	}
	r.topics = []string{all[0]}
	for _, want := range []string{"#", "$", " "} {
		for _, tp := range all[1:] {
			if strings.Contains(tp, want) && !slices.Contains(r.topics, tp) {
				r.topics = append(r.topics, tp)
				break
			}
		}
	}
	r.topics = append(r.topics, "bitcoin", "no such topic")
}

// advance moves the clock by whole seconds: mostly seconds to minutes,
// sometimes hours, now and then days.
func (r *oracleRun) advance() {
	var s int64
	switch p := r.rnd.IntN(100); {
	case p < 55:
		s = 1 + r.rnd.Int64N(59)
	case p < 82:
		s = 60 + r.rnd.Int64N(14*60)
	case p < 97:
		s = 15*60 + r.rnd.Int64N(165*60)
	default:
		s = 24*3600 + r.rnd.Int64N(2*24*3600)
	}
	r.clk.Advance(time.Duration(s) * time.Second)
}

// faults switches the upstream into a fault for a few steps now and then,
// and at least once in a run (by its third).
func (r *oracleRun) faults(steps int) {
	first := r.step == steps/3 && r.paths["fault: "+demo.FaultServerError.String()]+r.paths["fault: "+demo.FaultRateLimit.String()] == 0
	switch {
	case r.fault != demo.FaultNone && r.step >= r.faultEnds:
		r.fault = demo.FaultNone
		r.up.SetFault(demo.FaultNone)
		r.healthyFrom = r.clk.Now().Add(oracleRecovery)
	case r.fault == demo.FaultNone && (r.rnd.IntN(100) < 4 || first):
		r.fault = demo.FaultServerError
		// Not in cluster mode: the shared budget holds every call until the
		// upstream's reset, which the demo states on the fake clock (days
		// from the real time) while Redis counts on its own TIME.
		if r.rnd.IntN(10) < 3 && !r.v.cluster {
			r.fault = demo.FaultRateLimit
		}
		r.faultEnds = r.step + 1 + r.rnd.IntN(4)
		r.up.SetFault(r.fault)
		r.paths["fault: "+r.fault.String()]++
	}
}

// healthy reports whether the upstream answers normally and the gateway
// has had time to notice.
func (r *oracleRun) healthy() bool {
	return r.fault == demo.FaultNone && !r.clk.Now().Before(r.healthyFrom)
}

// restartNode drains node i (it writes its snapshot) and starts it again.
func (r *oracleRun) restartNode(i int) {
	for k := range r.own[i] {
		r.restored[i][k] = true
	}
	r.own[i] = map[string]bool{}
	nd := r.nodes[i]
	nd.Stop()
	r.retired += nd.UpstreamRequests() // read after the drain; the new gateway counts from 0
	nd.Start()
	r.paths["event: restart"]++
	// Clients come back with what they asked before: answers the snapshot
	// should hold (restored entries keep their original fetch time).
	for k := 0; k < 3 && k < len(r.seen); k++ {
		q := r.seen[len(r.seen)-1-k].q
		key := r.full
		if q.limited {
			key = r.lim
		}
		r.check(q, i, "GET after restart", r.nodes[i].Send(http.MethodGet, q.target, key))
	}
}

// quiesce waits until every upstream call that has reached the upstream
// has been read by the gateway that made it (the gateway counts
// trendgate_upstream_requests_total once it has read the answer), so a
// background refresh has noted the instant the upstream answered (its
// entry's fetch time, upstream.Response.Received, read before the call is
// counted) before the clock moves. A refresh that has not started by then
// starts after the move, and is as consistent.
//
// The condition must hold on two polls in a row (2 ms apart): with one
// poll, long runs on a loaded host still met a refresh answered before the
// move and noted after it (cause not pinned down; the counts may briefly
// balance while one call is still between the upstream and the gateway).
func (r *oracleRun) quiesce() {
	held := 0
	ok := gatewaytest.PollUntil(func() bool {
		if r.tap.Inflight.Load() == 0 && float64(r.tap.Arrived.Load()) == r.retired+r.finishedCalls() {
			held++
		} else {
			held = 0
		}
		return held >= 2
	})
	if !ok {
		r.t.Fatalf("upstream calls did not settle within 10 s: %d arrived, %v read by the gateways",
			r.tap.Arrived.Load(), r.retired+r.finishedCalls())
	}
}

// finishedCalls is how many upstream answers the running gateways have read.
func (r *oracleRun) finishedCalls() float64 {
	var n float64
	for _, nd := range r.nodes {
		n += nd.UpstreamRequests()
	}
	return n
}

// seenReq is a request a client got a passing 200 for, with its ETag.
type seenReq struct {
	q    oracleReq
	etag string
}

// oracleReq is one client request the driver makes.
type oracleReq struct {
	kind    string // for the summary: route and window shape
	ep      api.Endpoint
	target  string // the request-target as the client sends it
	limited bool

	// The series window as the client wrote it.
	bucket           int64
	start, end       int64
	hasStart, hasEnd bool
}

func (q oracleReq) plan() string {
	if q.limited {
		return "limited"
	}
	return "full"
}

// spell writes a topic as some client would in a path segment: case,
// '+' or %20 for a space, %23 for '#', '$' or %24.
func (r *oracleRun) spell(topic string) string {
	switch r.rnd.IntN(4) {
	case 0:
		topic = strings.ToUpper(topic)
	case 1:
		topic = strings.ToUpper(topic[:1]) + topic[1:]
	}
	space := []string{"%20", "+"}[r.rnd.IntN(2)]
	dollar := []string{"$", "%24"}[r.rnd.IntN(2)]
	return strings.NewReplacer(" ", space, "#", "%23", "$", dollar).Replace(topic)
}

// nextRequest makes a random request at the current instant.
func (r *oracleRun) nextRequest() oracleReq {
	rnd := r.rnd
	// The first topics are asked more often, so answers get reused.
	topic := r.topics[min(rnd.IntN(len(r.topics)), rnd.IntN(len(r.topics)))]
	seg := r.spell(topic)
	q := oracleReq{limited: rnd.IntN(100) < 40}
	switch p := rnd.IntN(100); {
	case p < 8:
		q.kind, q.ep, q.target = "list", api.EndpointList, "/api4/public/topics/list/v1"
		return q
	case p < 20:
		q.kind, q.ep, q.target = "whatsup", api.EndpointWhatsup, "/api4/public/topic/"+seg+"/whatsup/v1"
		return q
	case p < 32:
		metric := []string{"interactions", "posts_active", "contributors_active", "sentiment"}[rnd.IntN(4)]
		q.kind, q.ep, q.target = "tsv", api.EndpointTSV, "/topic/"+seg+"/time-series/"+metric+".tsv"
		return q
	}
	q.ep = api.EndpointSeries
	base := "/api4/public/topic/" + seg + "/time-series/v1"

	gwNow := r.clk.Now().Unix()
	anchor, clockName := gwNow, "gateway clock"
	if r.v.offset != 0 && rnd.IntN(2) == 0 {
		anchor, clockName = gwNow+int64(r.v.offset/time.Second), "upstream clock"
	}
	b, bucketParam := int64(3600), []string{"", "bucket=hour", "bucket=hours"}[rnd.IntN(3)]
	if rnd.IntN(100) < 20 {
		b, bucketParam = 86400, []string{"bucket=day", "bucket=days"}[rnd.IntN(2)]
	}
	q.bucket = b
	floor := func(x int64) int64 { return x - x%b }
	unaligned := rnd.IntN(2) == 0
	jit := func() int64 {
		if !unaligned {
			return 0
		}
		return 1 + rnd.Int64N(b-1)
	}
	span := int64(7 * 24)
	if b == 86400 {
		span = 7
	}
	var shape string
	switch p := rnd.IntN(100); {
	case p < 15:
		ivs := []string{"", "interval=1d", "interval=1w", "interval=1w", "interval=1m"}
		if b == 86400 {
			ivs = append(ivs, "interval=3m")
		}
		iv := ivs[rnd.IntN(len(ivs))]
		q.kind = "series interval"
		q.target = base + r.query(bucketParam, iv)
		return q
	case p < 27:
		shape = "sliding 7 days"
		q.start, q.end, q.hasStart, q.hasEnd = anchor-7*86400, anchor, true, true
	case p < 47:
		shape = "window in the last week"
		k := 1 + rnd.Int64N(span)
		s := floor(anchor) - k*b
		e := s + rnd.Int64N(k+1)*b
		q.start, q.end, q.hasStart, q.hasEnd = s+jit(), e+jit(), true, true
	case p < 53:
		shape = "window weeks back"
		k := span + 1 + rnd.Int64N(4*span)
		s := floor(anchor) - k*b
		q.start, q.end, q.hasStart, q.hasEnd = s+jit(), s+(1+rnd.Int64N(span))*b+jit(), true, true
	case p < 59:
		shape = "window up to now"
		q.start, q.end, q.hasStart, q.hasEnd = floor(anchor)-(1+rnd.Int64N(span))*b+jit(), anchor, true, true
	case p < 71:
		shape = "only start"
		q.start, q.hasStart = floor(anchor)-rnd.Int64N(span)*b+jit()-b*int64(rnd.IntN(2)), true
		q.start = min(q.start, anchor)
	case p < 83:
		shape = "only end"
		q.end, q.hasEnd = floor(anchor)-rnd.Int64N(span/2+1)*b+jit(), true
	default:
		shape = "end in the future"
		ahead := 1 + rnd.Int64N(15*60)
		if b == 86400 {
			ahead = 1 + rnd.Int64N(6*3600)
		}
		q.start, q.end, q.hasStart, q.hasEnd = floor(anchor)-(1+rnd.Int64N(span/2))*b+jit(), anchor+ahead, true, true
	}
	if q.hasStart && q.hasEnd && q.end <= q.start {
		q.end = q.start + 1 + rnd.Int64N(b)
	}
	align := "aligned"
	if unaligned {
		align = "unaligned"
	}
	q.kind = fmt.Sprintf("series %s (%s, %s, %s)", shape, map[int64]string{3600: "hour", 86400: "day"}[b], align, clockName)
	var params []string
	params = append(params, bucketParam)
	if q.hasStart {
		params = append(params, "start="+gatewaytest.Unix(q.start))
	}
	if q.hasEnd {
		params = append(params, "end="+gatewaytest.Unix(q.end))
	}
	q.target = base + r.query(params...)
	return q
}

// query joins the non-empty parameters in a random order.
func (r *oracleRun) query(params ...string) string {
	params = slices.DeleteFunc(params, func(p string) bool { return p == "" })
	r.rnd.Shuffle(len(params), func(i, j int) { params[i], params[j] = params[j], params[i] })
	if len(params) == 0 {
		return ""
	}
	return "?" + strings.Join(params, "&")
}

// once makes one step's request in one of the ways clients send it.
func (r *oracleRun) once() {
	q := r.nextRequest()
	key := r.full
	if q.limited {
		key = r.lim
	}
	n := r.rnd.IntN(len(r.nodes))
	if r.v.cluster {
		n = r.step % len(r.nodes) // alternate between the gateways
	}
	nd := r.nodes[n]
	switch p := r.rnd.IntN(100); {
	case p < 12: // identical requests at once: coalesced followers
		k := 2 + r.rnd.IntN(3)
		r.up.SetLatency(30 * time.Millisecond) // so the requests overlap the fetch
		reps := make([]gatewaytest.Reply, k)
		var wg sync.WaitGroup
		for j := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reps[j] = r.nodes[(n+j)%len(r.nodes)].Send(http.MethodGet, q.target, key)
			}()
		}
		wg.Wait()
		r.up.SetLatency(0)
		r.paths["via: concurrent burst"]++
		for j, rep := range reps {
			r.check(q, (n+j)%len(r.nodes), "GET (burst)", rep)
		}
	case p < 24:
		rep := nd.Send(http.MethodHead, q.target, key)
		r.checkHead(q, n, rep, key)
	case p < 38:
		rep := nd.Send(http.MethodGet, q.target, key, "Accept-Encoding", "gzip")
		if rep.Header.Get("Content-Encoding") == "gzip" {
			r.paths["via: gzip"]++
		}
		r.check(q, n, "GET gzip", rep)
	case p < 55 && len(r.seen) > 0: // a client revalidating what it has
		s := r.seen[r.rnd.IntN(len(r.seen))]
		q, etag := s.q, s.etag
		if q.limited {
			key = r.lim
		} else {
			key = r.full
		}
		rep := nd.Send(http.MethodGet, q.target, key, "If-None-Match", etag)
		if rep.Err != nil || rep.Status != http.StatusNotModified {
			r.check(q, n, "GET If-None-Match", rep)
			return
		}
		r.checkNotModified(q, n, rep, key, etag)
	default:
		r.check(q, n, "GET", nd.Send(http.MethodGet, q.target, key))
	}
}

// checked is what check learned about a 200.
type checked struct {
	ok  bool
	tau time.Time
}

// check holds one gateway answer to the upstream's and records its path.
func (r *oracleRun) check(q oracleReq, n int, how string, rep gatewaytest.Reply) checked {
	if rep.Err != nil {
		r.fail(q, "transport", fmt.Sprintf("%s %s on node %d: %v", how, q.target, n, rep.Err))
		return checked{}
	}
	now := r.clk.Now()
	cs := rep.Header.Get("Cache-Status")
	path := gatewaytest.PathOf(cs)
	if rep.Status != http.StatusOK {
		r.refusal(q, n, how, rep, now)
		return checked{}
	}
	r.paths["cache: "+path]++
	r.paths["plan: "+q.plan()]++
	r.paths["route: "+q.ep.String()]++
	r.attribute(q, n, path, now)
	age, err := strconv.ParseInt(rep.Header.Get("Age"), 10, 64)
	if err != nil || age < 0 {
		r.fail(q, path, fmt.Sprintf("%s %s: 200 with Age %q (Cache-Status %q)", how, q.target, rep.Header.Get("Age"), cs))
		return checked{}
	}
	tau := now.Add(-time.Duration(age) * time.Second)
	body, err := gatewaytest.Gunzip(rep.Header.Get("Content-Encoding"), rep.Body)
	if err != nil {
		r.fail(q, path, fmt.Sprintf("%s %s: gzip body: %v", how, q.target, err))
		return checked{}
	}
	upTarget := gatewaytest.UpstreamTarget(q.target)
	upStatus, upBody := r.ref.AnswerAt(upTarget, tau)
	var proj *projection.Projection
	if q.limited {
		proj = r.proj
	}
	var v gatewaytest.Verdict
	if upStatus != http.StatusOK {
		v.Detail = fmt.Sprintf("the upstream answered %d at τ: %s", upStatus, upBody)
		var g gatewaytest.SeriesBody
		if json.Unmarshal(body, &g) == nil {
			v.GotRows = len(g.Data)
		}
	} else {
		v = gatewaytest.CompareBodies(q.ep, proj, body, upBody)
	}
	if !v.OK {
		r.fail(q, path, fmt.Sprintf(
			"%s %s (plan %s, node %d start %d)\n"+
				"  path: Cache-Status %q, Age %d → τ %s (gateway now %s; upstream clock at τ %s)\n"+
				"  upstream asked: %s\n"+
				"  rows/items: gateway %d, upstream %d: %s\n"+
				"  gateway body:  %s\n"+
				"  upstream body: %s",
			how, q.target, q.plan(), n, r.nodes[n].Gen,
			cs, age, stamp(tau), stamp(now), stamp(tau.Add(r.v.offset)),
			upTarget, v.GotRows, v.UpRows, v.Detail, gatewaytest.Clip(body, 1500), gatewaytest.Clip(upBody, 1500)))
		return checked{tau: tau}
	}
	if etag := rep.Header.Get("ETag"); etag != "" {
		r.seen = append(r.seen, seenReq{q: q, etag: etag})
		if len(r.seen) > 24 {
			r.seen = r.seen[1:]
		}
	}
	return checked{ok: true, tau: tau}
}

// stamp writes an instant as UTC and unix seconds.
func stamp(t time.Time) string {
	return fmt.Sprintf("%s (%d)", t.UTC().Format("2006-01-02 15:04:05"), t.Unix())
}

// attribute records the cache tier a hit came from: the node's own local
// tier, its snapshot (after a restart) or, in cluster mode, Redis.
func (r *oracleRun) attribute(q oracleReq, n int, path string, now time.Time) {
	hr := httptest.NewRequest(http.MethodGet, q.target, nil)
	canon, err := api.ParseRequest(hr, now)
	if err != nil {
		return
	}
	key := canon.Key()
	switch path {
	case "hit", "stale", "stale-if-error":
		switch {
		case r.own[n][key]:
		case r.restored[n][key]:
			r.paths["tier: snapshot"]++
		case r.v.cluster:
			r.paths["tier: redis"]++
		}
	}
	r.own[n][key] = true
}

// refusal records a non-200 answer and fails it when the upstream would
// have answered (a 5xx while it is healthy, a 400).
func (r *oracleRun) refusal(q oracleReq, n int, how string, rep gatewaytest.Reply, now time.Time) {
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(rep.Body, &e)
	upStatus, _ := r.ref.AnswerAt(gatewaytest.UpstreamTarget(q.target), now)
	label := fmt.Sprintf("%d %s (upstream %d)", rep.Status, e.Code, upStatus)
	failing := false
	switch {
	case upStatus != http.StatusOK:
	case rep.Status >= 500 && r.healthy():
		failing = true
	case rep.Status == http.StatusBadRequest:
		// The gateway documents no 400 for a window the upstream answers
		// (bounds in the future are forwarded).
		failing = true
	}
	if rep.Status == http.StatusBadRequest {
		label += " " + q.kind
	}
	if failing {
		r.refusals["FAIL "+label]++
		r.fail(q, "refused", fmt.Sprintf("%s %s (plan %s, node %d): gateway %d %s while the upstream answers 200 (healthy %v, gateway now %s)\n  body: %s",
			how, q.target, q.plan(), n, rep.Status, e.Code, r.healthy(), stamp(now), gatewaytest.Clip(rep.Body, 400)))
		return
	}
	r.refusals[label]++
}

// checkHead checks a HEAD: no body, and the headers of a GET made at the
// same instant (compared when both come from the same fetch).
func (r *oracleRun) checkHead(q oracleReq, n int, rep gatewaytest.Reply, key string) {
	if rep.Err != nil || rep.Status != http.StatusOK {
		r.check(q, n, "HEAD", rep)
		return
	}
	r.paths["via: HEAD"]++
	if len(rep.Body) != 0 {
		r.fail(q, gatewaytest.PathOf(rep.Header.Get("Cache-Status")), fmt.Sprintf("HEAD %s: %d body bytes; want none", q.target, len(rep.Body)))
	}
	r.quiesce()
	get := r.nodes[n].Send(http.MethodGet, q.target, key)
	gc := r.check(q, n, "GET after HEAD", get)
	if !gc.ok {
		return
	}
	hAge, _ := strconv.ParseInt(rep.Header.Get("Age"), 10, 64)
	if r.clk.Now().Add(-time.Duration(hAge)*time.Second) != gc.tau {
		r.paths["HEAD: refreshed before its GET (not compared)"]++
		return
	}
	for _, h := range []string{"ETag", "Content-Type", "Content-Length", "X-Data-Mode"} {
		if a, b := rep.Header.Get(h), get.Header.Get(h); a != b {
			r.fail(q, "HEAD", fmt.Sprintf("HEAD %s (plan %s): %s %q; the GET's %q", q.target, q.plan(), h, a, b))
		}
	}
}

// checkNotModified checks a 304: it must carry the ETag sent and the ETag
// of a passing 200 for the same request and key at that moment.
func (r *oracleRun) checkNotModified(q oracleReq, n int, rep gatewaytest.Reply, key, sent string) {
	path := gatewaytest.PathOf(rep.Header.Get("Cache-Status"))
	r.paths["via: 304"]++
	r.paths["304 after "+path]++
	got := rep.Header.Get("ETag")
	if len(rep.Body) != 0 {
		r.fail(q, path, fmt.Sprintf("304 for %s with %d body bytes", q.target, len(rep.Body)))
	}
	if got != sent {
		r.fail(q, path, fmt.Sprintf("304 for %s (plan %s): ETag %q; If-None-Match was %q", q.target, q.plan(), got, sent))
	}
	r.quiesce()
	get := r.nodes[n].Send(http.MethodGet, q.target, key)
	gc := r.check(q, n, "GET after 304", get)
	if !gc.ok {
		return
	}
	age, _ := strconv.ParseInt(rep.Header.Get("Age"), 10, 64)
	if r.clk.Now().Add(-time.Duration(age)*time.Second) != gc.tau {
		r.paths["304: refreshed before its GET (not compared)"]++
		return
	}
	if g := get.Header.Get("ETag"); g != got {
		r.fail(q, path, fmt.Sprintf("304 for %s (plan %s) carried ETag %q; the passing 200 at that moment has %q", q.target, q.plan(), got, g))
	}
}

// fail records a failed check; the first maxDetailed are printed in full.
func (r *oracleRun) fail(q oracleReq, path, msg string) {
	r.nfail++
	r.failures[fmt.Sprintf("%s | %s | %s", q.kind, path, q.plan())]++
	if r.nfail <= maxDetailed {
		r.t.Errorf("oracle (variant %s, seed %d, step %d): %s", r.v.name, r.seed, r.step, msg)
	}
}

// report logs what the run did and fails on paths it should have taken.
func (r *oracleRun) report() {
	t := r.t
	t.Logf("oracle %s seed %d: %d steps, %d upstream calls, clock %s → %s\npaths:\n%srefusals (non-200; FAIL marks failing ones):\n%s",
		r.v.name, r.seed, r.step, r.tap.Arrived.Load(), stamp(r.start), stamp(r.clk.Now()), r.paths, r.refusals)
	if r.nfail > 0 {
		t.Errorf("oracle %s seed %d: %d failed checks (first %d above), by request kind | path | plan:\n%s",
			r.v.name, r.seed, r.nfail, min(r.nfail, maxDetailed), r.failures)
	}
	want := append(append([]string(nil), oracleAlwaysWant...), r.v.want...)
	for _, p := range want {
		if r.paths[p] == 0 {
			t.Errorf("oracle %s seed %d: no answer took the path %q in %d steps", r.v.name, r.seed, p, r.step)
		}
	}
	for _, p := range oracleSoftWant {
		if p == "tier: snapshot" && !r.v.restart {
			continue
		}
		if r.paths[p] == 0 {
			t.Logf("oracle %s seed %d: (soft) no answer took the path %q", r.v.name, r.seed, p)
		}
	}
}
