package activity

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Outcome is how the gateway answered one request, for the rates.
type Outcome uint8

// The outcomes. Hit, Stale and Miss are delivered answers (2xx or 304) by
// where their body came from; Limited is a 429; Rejected any other 4xx (a
// bad request, a missing or invalid key, an endpoint not in the plan, an
// unknown topic); Error a 5xx.
const (
	OutcomeHit Outcome = iota
	OutcomeStale
	OutcomeMiss
	OutcomeError
	OutcomeLimited
	OutcomeRejected
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"hit", "stale", "miss", "error", "limited", "rejected"}

// String returns the outcome's name: hit, stale, miss, error, limited or
// rejected.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// Outcomes lists every outcome in display order.
var Outcomes = []Outcome{OutcomeHit, OutcomeStale, OutcomeMiss, OutcomeError, OutcomeLimited, OutcomeRejected}

// The windows a Snapshot reports.
const (
	// RateWindow is the span request rates are averaged over: the full
	// seconds before the current one.
	RateWindow = 10 * time.Second
	// UpstreamWindow is the span upstream calls are counted over: the
	// current second and the 59 before it.
	UpstreamWindow = time.Minute
	// LatencyWindow is the span latency quantiles cover: the current
	// ten-second slot and the five before it (50 to 60 s).
	LatencyWindow = time.Minute
	// RefusalWindow is the span refusals are counted over: the current
	// minute and the nine before it.
	RefusalWindow = 10 * time.Minute
	// TopicPeriod is the length of one topic table; top topics cover the
	// current period and the one before it (5 to 10 minutes).
	TopicPeriod = 5 * time.Minute
)

const (
	secondSlots  = 64 // per-second ring: rates (10 s) and upstream calls (60 s)
	latencySlots = 8  // ten-second ring; six are read
	latencySlot  = 10 // seconds per latency slot
	refusalSlots = 16 // minute ring; ten are read
	topicSlots   = 512
	topicProbes  = 4
)

// latencyBounds are the upper bounds of the latency histogram buckets:
// 25 µs growing by 25% a bucket to past 60 s; a last bucket takes the rest.
// Quantiles are interpolated inside one bucket, so they are within 25%.
var latencyBounds = func() []time.Duration {
	var b []time.Duration
	for d := 25.0 * float64(time.Microsecond); ; d *= 1.25 {
		b = append(b, time.Duration(d))
		if d > float64(time.Minute) {
			return b
		}
	}
}()

// Recorder keeps the gateway-wide figures of the last minutes. Use New;
// it is safe for concurrent use, and Request neither locks nor allocates
// (except once per TopicPeriod, when the first request of a period starts
// a new topic table).
type Recorder struct {
	started time.Time
	seed    maphash.Seed

	totals   [numOutcomes]atomic.Uint64
	upTotal  atomic.Uint64
	seconds  [secondSlots][numOutcomes]tagged
	upstream [secondSlots]tagged
	latency  [latencySlots][]tagged // each len(latencyBounds)+1

	topics     atomic.Pointer[topicTable] // the current period's table
	prevTopics atomic.Pointer[topicTable] // the one before, or older

	refusals sync.Map // error code (string) → *[refusalSlots]tagged
}

// topicTable counts requests and upstream calls per topic for one
// TopicPeriod: open addressing over fixed slots, each claimed once by the
// first topic hashed to it (the only allocation). A topic that finds its
// probe slots taken by others is counted in other.
type topicTable struct {
	period  uint64
	entries [topicSlots]topicEntry
	other   atomic.Uint64
}

type topicEntry struct {
	name     atomic.Pointer[string]
	requests atomic.Uint64
	upstream atomic.Uint64
}

// New returns a Recorder started at now.
func New(now time.Time) *Recorder {
	r := &Recorder{started: now, seed: maphash.MakeSeed()}
	for i := range r.latency {
		r.latency[i] = make([]tagged, len(latencyBounds)+1)
	}
	r.topics.Store(&topicTable{period: periodOf(now)})
	return r
}

func secondOf(now time.Time) uint64 { return uint64(max(now.Unix(), 0)) }
func periodOf(now time.Time) uint64 { return secondOf(now) / uint64(TopicPeriod/time.Second) }

// Request records one answered request: its outcome, how long it took,
// and its canonical topic ("" for none, e.g. the topics list).
func (r *Recorder) Request(now time.Time, o Outcome, took time.Duration, topic string) {
	if o >= numOutcomes {
		return
	}
	s := secondOf(now)
	r.totals[o].Add(1)
	r.seconds[s%secondSlots][o].add(s, 1)
	ls := s / latencySlot
	r.latency[ls%latencySlots][latencyBucket(took)].add(ls, 1)
	if topic != "" {
		if e := r.topicEntry(now, topic); e != nil {
			e.requests.Add(1)
		}
	}
}

// UpstreamCall records one request sent to the upstream at now for topic
// ("" for none).
func (r *Recorder) UpstreamCall(now time.Time, topic string) {
	s := secondOf(now)
	r.upTotal.Add(1)
	r.upstream[s%secondSlots].add(s, 1)
	if topic != "" {
		if e := r.topicEntry(now, topic); e != nil {
			e.upstream.Add(1)
		}
	}
}

// Refusal records one error answer at now by its stable code
// (rate_limited, invalid_api_key, upstream_budget_exhausted, ...). Codes
// are a small fixed set; the first of each allocates its counters.
func (r *Recorder) Refusal(now time.Time, code string) {
	v, ok := r.refusals.Load(code)
	if !ok {
		v, _ = r.refusals.LoadOrStore(code, new([refusalSlots]tagged))
	}
	m := secondOf(now) / 60
	v.(*[refusalSlots]tagged)[m%refusalSlots].add(m, 1)
}

// latencyBucket returns the histogram bucket of d.
func latencyBucket(d time.Duration) int {
	lo, hi := 0, len(latencyBounds)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if latencyBounds[mid] < d {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// topicEntry returns topic's entry in the current table, or nil when its
// probe slots hold other topics.
func (r *Recorder) topicEntry(now time.Time, topic string) *topicEntry {
	t := r.topicTable(periodOf(now))
	i := maphash.String(r.seed, topic)
	for p := range uint64(topicProbes) {
		e := &t.entries[(i+p)%topicSlots]
		name := e.name.Load()
		if name == nil {
			claimed := new(string)
			*claimed = topic
			if e.name.CompareAndSwap(nil, claimed) {
				return e
			}
			name = e.name.Load()
		}
		if *name == topic {
			return e
		}
	}
	t.other.Add(1)
	return nil
}

// topicTable returns the table of period, starting it when the current one
// is older. A late writer for a past period counts in the current table.
func (r *Recorder) topicTable(period uint64) *topicTable {
	t := r.topics.Load()
	if t.period >= period {
		return t
	}
	next := &topicTable{period: period}
	if r.topics.CompareAndSwap(t, next) {
		r.prevTopics.Store(t)
		return next
	}
	return r.topics.Load()
}

// Snapshot is the Recorder's figures at one moment.
type Snapshot struct {
	// Started is when the Recorder was created (the process start).
	Started time.Time
	// Rates holds requests per second over RateWindow, indexed by Outcome;
	// Totals the counts since Started.
	Rates  [numOutcomes]float64
	Totals [numOutcomes]uint64
	// HitRatio is (hit + stale) / (hit + stale + miss) over RateWindow and
	// HitRatioTotal since Started; -1 when there was no such request.
	HitRatio, HitRatioTotal float64
	// P50 and P99 are latency quantiles over LatencyWindow, from
	// LatencySamples requests (both 0 without samples).
	P50, P99       time.Duration
	LatencySamples uint64
	// UpstreamLastMinute counts requests sent to the upstream over
	// UpstreamWindow; UpstreamTotal since Started.
	UpstreamLastMinute, UpstreamTotal uint64
	// TopicsSince is the start of the oldest topic period counted.
	// TopByRequests and TopByUpstream list at most n topics each, most
	// first (ties by name); OtherTopicRequests counts the requests for
	// topics the tables had no room for.
	TopicsSince        time.Time
	TopByRequests      []TopicCount
	TopByUpstream      []TopicCount
	OtherTopicRequests uint64
	// Refusals counts error answers by code over RefusalWindow, most
	// first (ties by code).
	Refusals []CodeCount
}

// TopicCount is one topic's requests and upstream calls.
type TopicCount struct {
	Topic              string
	Requests, Upstream uint64
}

// CodeCount is one error code's count.
type CodeCount struct {
	Code  string
	Count uint64
}

// Snapshot returns the figures at now, with at most n topics per list.
func (r *Recorder) Snapshot(now time.Time, n int) Snapshot {
	s := Snapshot{Started: r.started, HitRatio: -1, HitRatioTotal: -1}
	sec := secondOf(now)
	win := uint64(RateWindow / time.Second)
	for o := range numOutcomes {
		var sum uint64
		for back := uint64(1); back <= win && back <= sec; back++ {
			sum += r.seconds[(sec-back)%secondSlots][o].get(sec - back)
		}
		s.Rates[o] = float64(sum) / float64(win)
		s.Totals[o] = r.totals[o].Load()
	}
	s.HitRatio = hitRatio(s.Rates[OutcomeHit], s.Rates[OutcomeStale], s.Rates[OutcomeMiss])
	s.HitRatioTotal = hitRatio(float64(s.Totals[OutcomeHit]), float64(s.Totals[OutcomeStale]), float64(s.Totals[OutcomeMiss]))

	for back := uint64(0); back < uint64(UpstreamWindow/time.Second) && back <= sec; back++ {
		s.UpstreamLastMinute += r.upstream[(sec-back)%secondSlots].get(sec - back)
	}
	s.UpstreamTotal = r.upTotal.Load()

	hist := make([]uint64, len(latencyBounds)+1)
	ls := sec / latencySlot
	for back := uint64(0); back < uint64(LatencyWindow/time.Second)/latencySlot && back <= ls; back++ {
		for b := range hist {
			hist[b] += r.latency[(ls-back)%latencySlots][b].get(ls - back)
		}
	}
	for _, c := range hist {
		s.LatencySamples += c
	}
	s.P50, s.P99 = quantile(hist, s.LatencySamples, 0.50), quantile(hist, s.LatencySamples, 0.99)

	s.TopicsSince, s.TopByRequests, s.TopByUpstream, s.OtherTopicRequests = r.topTopics(now, n)

	m := sec / 60
	r.refusals.Range(func(k, v any) bool {
		var sum uint64
		for back := uint64(0); back < uint64(RefusalWindow/time.Minute) && back <= m; back++ {
			sum += v.(*[refusalSlots]tagged)[(m-back)%refusalSlots].get(m - back)
		}
		if sum > 0 {
			s.Refusals = append(s.Refusals, CodeCount{Code: k.(string), Count: sum})
		}
		return true
	})
	slices.SortFunc(s.Refusals, func(a, b CodeCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Code, b.Code))
	})
	return s
}

func hitRatio(hit, stale, miss float64) float64 {
	if hit+stale+miss == 0 {
		return -1
	}
	return (hit + stale) / (hit + stale + miss)
}

// quantile returns the q quantile of a histogram of total samples,
// interpolated linearly inside the bucket where it falls.
func quantile(hist []uint64, total uint64, q float64) time.Duration {
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var cum float64
	for b, c := range hist {
		if c == 0 {
			continue
		}
		if cum+float64(c) >= rank {
			lo, hi := 0.0, float64(latencyBounds[min(b, len(latencyBounds)-1)])
			if b > 0 {
				lo = float64(latencyBounds[b-1])
			}
			if b == len(latencyBounds) { // the open last bucket: report its floor
				return latencyBounds[b-1]
			}
			frac := (rank - cum) / float64(c)
			return time.Duration(math.Round(lo + frac*(hi-lo)))
		}
		cum += float64(c)
	}
	return latencyBounds[len(latencyBounds)-1]
}

// topTopics merges the current and the previous topic tables (when the
// previous one is the period just before) and returns the n topics with
// the most requests and the n with the most upstream calls.
func (r *Recorder) topTopics(now time.Time, n int) (since time.Time, byReq, byUp []TopicCount, other uint64) {
	period := periodOf(now)
	counts := map[string]*TopicCount{}
	oldest := period
	for _, t := range []*topicTable{r.topics.Load(), r.prevTopics.Load()} {
		if t == nil || t.period > period || period-t.period > 1 {
			continue
		}
		oldest = min(oldest, t.period)
		other += t.other.Load()
		for i := range t.entries {
			e := &t.entries[i]
			name := e.name.Load()
			if name == nil {
				continue
			}
			tc := counts[*name]
			if tc == nil {
				tc = &TopicCount{Topic: *name}
				counts[*name] = tc
			}
			tc.Requests += e.requests.Load()
			tc.Upstream += e.upstream.Load()
		}
	}
	since = time.Unix(int64(oldest)*int64(TopicPeriod/time.Second), 0).UTC()
	all := make([]TopicCount, 0, len(counts))
	for _, tc := range counts {
		all = append(all, *tc)
	}
	top := func(key func(TopicCount) uint64) []TopicCount {
		out := slices.Clone(all)
		slices.SortFunc(out, func(a, b TopicCount) int {
			return cmp.Or(cmp.Compare(key(b), key(a)), cmp.Compare(a.Topic, b.Topic))
		})
		out = slices.DeleteFunc(out, func(tc TopicCount) bool { return key(tc) == 0 })
		return out[:min(n, len(out))]
	}
	return since, top(func(tc TopicCount) uint64 { return tc.Requests }), top(func(tc TopicCount) uint64 { return tc.Upstream }), other
}
