package demo

import (
	"fmt"
	"math"
	"time"
)

// Hash tags keep the independent random streams apart.
const (
	tagName uint64 = iota + 1
	tagTopic
	tagProfile
	tagNoise
	tagSpike
	tagMiss
	tagFlat
	tagList
	tagAge
	tagWhatsup
	tagRevise
)

const (
	hour = int64(3600)
	day  = int64(86400)
	// epochRef anchors slow trends (supply growth): 2025-01-01 00:00 UTC.
	epochRef = int64(1735689600)
	// earliest is the first day any series has data: 2020-01-01 00:00 UTC.
	earliest = int64(1577836800)
)

// mix is the splitmix64 finaliser: a fast, well-distributed bijection.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// hash3 combines three values into one pseudo-random word.
func hash3(a, b, c uint64) uint64 { return mix(a ^ mix(b^mix(c))) }

// fnv64 is FNV-1a over s.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// unit maps h to [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// noise is a multiplicative jitter around 1 with the given spread.
func noise(h uint64, spread float64) float64 { return math.Exp((unit(h) - 0.5) * spread) }

// sample is one hourly (or aggregated daily) data point.
type sample struct {
	time                                    int64
	contribActive, contribCreated           int64
	interactions, postsActive, postsCreated int64
	spam                                    int64
	sentiment                               int64

	// Market fields, meaningful only for asset topics.
	open, high, low, close float64
	supply, marketCap      float64
	marketDom, socialDom   float64
	volume                 float64
	altRank, galaxy        int64
}

// diurnal is the daily activity cycle: about 2.1x between the trough and
// the peak around 14:00 UTC.
func diurnal(ts int64) float64 {
	h := float64((ts%day+day)%day) / float64(hour)
	return 1 + 0.35*math.Cos(2*math.Pi*(h-14)/24)
}

// spikeReach is how many hours a news spike lasts.
const spikeReach = 24

// spikeAt reports whether a news spike starts at hour s, with its
// magnitude and half-life in hours: a spike starts with probability ~0.4%
// per hour, jumps 10-20x and halves every 1-6 hours.
func (t *topicInfo) spikeAt(s int64) (mag, half float64, ok bool) {
	h := hash3(t.key, uint64(s), tagSpike)
	if h%1000 >= 4 {
		return 0, 0, false
	}
	return float64(10 + (h>>10)%11), float64(1 + (h>>20)%6), true
}

// spikeFactor is the news-spike multiplier at hour ts. It adds the spikes
// oldest first, the order spikeRange uses, so both give identical bits.
func (t *topicInfo) spikeFactor(ts int64) float64 {
	f := 1.0
	for k := int64(spikeReach - 1); k >= 0; k-- {
		if mag, half, ok := t.spikeAt(ts - k*hour); ok {
			f += (mag - 1) * math.Exp2(-float64(k)/half)
		}
	}
	return f
}

// spikeRange returns spikeFactor for the n hours starting at hour from,
// in one pass over the spike starts (equal to calling spikeFactor per hour).
func (t *topicInfo) spikeRange(from int64, n int, dst []float64) []float64 {
	dst = dst[:0]
	for i := 0; i < n; i++ {
		dst = append(dst, 1)
	}
	for s := from - (spikeReach-1)*hour; s < from+int64(n)*hour; s += hour {
		mag, half, ok := t.spikeAt(s)
		if !ok {
			continue
		}
		for k := int64(0); k < spikeReach; k++ {
			if i := (s + k*hour - from) / hour; i >= 0 && i < int64(n) {
				dst[i] += (mag - 1) * math.Exp2(-float64(k)/half)
			}
		}
	}
	return dst
}

// missing reports whether hour ts has no data at all.
func (t *topicInfo) missing(ts int64) bool {
	return hash3(t.key, uint64(ts), tagMiss)%1000 < t.missPerMille
}

// price is the asset's continuous price path at unix time ts.
func (t *topicInfo) price(ts float64) float64 {
	ph := &t.phases
	x := 0.16*math.Sin(2*math.Pi*ts/(91*86400)+ph[0]) +
		0.06*math.Sin(2*math.Pi*ts/(9.3*86400)+ph[1]) +
		0.015*math.Sin(2*math.Pi*ts/(19*3600)+ph[2]) +
		0.004*math.Sin(2*math.Pi*ts/(2.3*3600)+ph[3])
	return t.asset.price * math.Exp(x)
}

// hourSample generates hour ts of topic t; frac in (0, 1] is the part of
// the hour that has elapsed (the current bucket is partial) and spike is
// spikeFactor(ts).
func (t *topicInfo) hourSample(ts int64, frac, spike float64) sample {
	base := hash3(t.key, uint64(ts), tagNoise)
	n := func(i uint64) uint64 { return mix(base + i*0x9e3779b97f4a7c15) }
	d := diurnal(ts) * frac
	sq := math.Sqrt(spike)
	s := sample{time: ts}
	s.interactions = int64(t.hInteractions * d * spike * noise(n(1), 0.35))
	s.contribActive = int64(t.hContribs * d * sq * noise(n(2), 0.25))
	s.postsActive = int64(t.hPosts * d * sq * noise(n(3), 0.25))
	s.postsCreated = int64(t.hCreated * d * sq * noise(n(4), 0.5))
	s.contribCreated = int64(float64(s.postsCreated) * 0.72 * noise(n(5), 0.2))
	s.spam = int64(float64(s.postsCreated) * 0.3 * noise(n(6), 0.9))
	sent := t.sentiment + 8*(unit(n(7))-0.5)
	if spike > 3 {
		sent -= 6 // news spikes skew negative
	}
	s.sentiment = int64(math.Round(min(max(sent, 1), 99)))
	if t.asset == nil {
		return s
	}
	a := t.asset
	s.open = t.price(float64(ts))
	s.close = t.price(float64(ts) + 3600*frac)
	if n(8)%8 == 0 { // flat hours: open = high = low = close
		s.close = s.open
	}
	wig := 1 + 0.002*unit(n(9))
	s.high = max(s.open, s.close) * wig
	s.low = min(s.open, s.close) / wig
	if s.open == s.close {
		s.high, s.low = s.open, s.open
	}
	years := float64(ts-epochRef) / float64(365*day)
	s.supply = math.Round(a.supply * (1 + a.growth*years))
	s.marketCap = math.Round(s.close * s.supply)
	s.marketDom = a.dominance * math.Exp(0.04*math.Sin(float64(ts)/(17*86400)+unit(t.key)*6))
	s.socialDom = a.socialDom * math.Pow(spike, 0.3) * noise(n(10), 0.5)
	s.volume = math.Round(a.volume * noise(n(11), 0.6) * math.Pow(spike, 0.4))
	s.galaxy = int64(min(max(t.galaxyBase+10*math.Sin(float64(ts)/(5*86400))+6*(unit(n(12))-0.5), 1), 100))
	s.altRank = int64(max(a.altRank*noise(n(13), 0.8), 1))
	return s
}

// window is a resolved time-series request.
type window struct {
	bucket   int64  // hour or day, seconds
	interval string // echoed interval; empty when start or end was given
	start    int64  // echoed start
	end      int64  // echoed end
	first    int64  // first bucket start to emit
	last     int64  // last bucket start to emit (at most the current bucket)
	revise   bool   // closed hours are still being revised (Options.Revise)
}

// The values of Options.StartReading and Options.EndReading.
const (
	startFloor          = "floor"
	startCeil           = "ceil"
	endInclusive        = "inclusive"
	endExclusive        = "exclusive"
	endFloorExclusive   = "floor_exclusive"
	defaultStartReading = startFloor
	defaultEndReading   = endInclusive
)

// variant is how one upstream reads absolute windows and shows its newest
// data: Options.StartReading, EndReading, Lag and Revise with their
// defaults filled in. The zero value is not meaningful; see newVariant.
type variant struct {
	start  string        // startFloor or startCeil
	end    string        // endInclusive, endExclusive or endFloorExclusive
	lag    time.Duration // the current bucket is hidden this long into each hour
	revise bool          // closed hours keep changing for reviseSpan
}

// newVariant validates the reading, lag and revise options and fills in
// their defaults. A non-empty msg says what is wrong.
func newVariant(startReading, endReading string, lag time.Duration, revise bool) (v variant, msg string) {
	v = variant{start: startReading, end: endReading, lag: lag, revise: revise}
	switch v.start {
	case "":
		v.start = defaultStartReading
	case startFloor, startCeil:
	default:
		return v, fmt.Sprintf("start reading %q: want floor or ceil", startReading)
	}
	switch v.end {
	case "":
		v.end = defaultEndReading
	case endInclusive, endExclusive, endFloorExclusive:
	default:
		return v, fmt.Sprintf("end reading %q: want inclusive, exclusive or floor_exclusive", endReading)
	}
	if lag < 0 || lag > time.Hour {
		return v, fmt.Sprintf("lag %v not in 0..1h", lag)
	}
	return v, ""
}

// firstBucket is the first bucket of size b that an absolute window
// starting at start selects.
func (v variant) firstBucket(start, b int64) int64 {
	if v.start == startCeil {
		return alignUp(start, b)
	}
	return alignDown(start, b)
}

// lastBucket is the last bucket of size b that an absolute window ending at
// end selects (before capping at the current bucket).
func (v variant) lastBucket(end, b int64) int64 {
	switch v.end {
	case endExclusive:
		return alignDown(end-1, b)
	case endFloorExclusive:
		return alignDown(end, b) - b
	}
	return alignDown(end, b)
}

// hidesCurrent reports whether, at now, the current bucket's row is still
// hidden by the lag: less than lag has passed since the current hour began.
// With a lag of a whole hour the current bucket is never shown.
func (v variant) hidesCurrent(now time.Time) bool {
	return now.Sub(time.Unix(alignDown(now.Unix(), hour), 0)) < v.lag
}

// newest is the start of the newest bucket of size b this upstream shows
// at now: the current one, or the one before while the lag hides it.
func (v variant) newest(now time.Time, b int64) int64 {
	cur := alignDown(now.Unix(), b)
	if v.hidesCurrent(now) {
		cur -= b
	}
	return cur
}

// intervalDays maps the accepted interval values to their length in days.
var intervalDays = map[string]int64{
	"1d": 1, "1w": 7, "1m": 30, "3m": 90, "6m": 180, "1y": 365, "all": -1,
}

// maxRows caps very long windows: one year of hours, two years of days.
func maxRows(bucket int64) int64 {
	if bucket == hour {
		return 366 * 24
	}
	return 2 * 366
}

// alignUp returns the first multiple of b at or after x.
func alignUp(x, b int64) int64 {
	r := ((x % b) + b) % b
	if r == 0 {
		return x
	}
	return x - r + b
}

// alignDown returns the last multiple of b at or before x.
func alignDown(x, b int64) int64 { return x - ((x%b)+b)%b }

// resolveWindow applies the interval/start/end rules of q at now, the
// upstream's own time, read the way v reads them. When q has start or end,
// interval is ignored. generated is the echoed generation time (the default
// window's end echoes generated + 2 h, a quirk of the real API). Rows never
// go past the newest bucket v shows at now.
func resolveWindow(now time.Time, generated int64, q seriesQuery, v variant) window {
	unixNow := now.Unix()
	newest := v.newest(now, q.bucket)
	w := window{bucket: q.bucket, revise: v.revise}
	if q.hasStart || q.hasEnd {
		start, end := q.start, q.end
		if !q.hasEnd {
			end = unixNow
		}
		if !q.hasStart {
			start = end - 7*day
		}
		w.start, w.end = start, end
		w.first = v.firstBucket(start, q.bucket)
		w.last = min(v.lastBucket(end, q.bucket), newest)
	} else {
		w.interval = q.interval
		if days := intervalDays[q.interval]; days > 0 {
			w.start = alignDown(unixNow-days*day, day)
		} else {
			w.start = earliest
		}
		w.end = generated + 7200
		w.first = w.start
		w.last = newest
	}
	w.first = max(w.first, earliest, w.last-(maxRows(q.bucket)-1)*q.bucket)
	if !q.hasStart && !q.hasEnd && q.interval == "all" {
		w.start = w.first
	}
	return w
}

// tsvWindow is the window of a raw TSV download at now: the last 24 hours
// up to the newest hour v shows.
func tsvWindow(now time.Time, v variant) window {
	last := v.newest(now, hour)
	return window{bucket: hour, first: last - 23*hour, last: last, revise: v.revise}
}

// rows generates the samples of w for topic t at now, ascending by time.
// Hours with no data are left out, except the current one, which is
// partial. spikes is scratch space, returned for reuse.
func (t *topicInfo) rows(w window, now time.Time, dst []sample, spikes []float64) ([]sample, []float64) {
	if w.first > w.last {
		return dst, spikes
	}
	unixNow := now.Unix()
	cur := alignDown(unixNow, hour)
	lastHour := min(w.last+w.bucket-hour, cur)
	spikes = t.spikeRange(w.first, int((lastHour-w.first)/hour)+1, spikes)
	for b := w.first; b <= w.last; b += w.bucket {
		if w.bucket == hour {
			if b < cur && t.missing(b) {
				continue
			}
			s := t.hourSample(b, elapsed(b, hour, unixNow), spikes[(b-w.first)/hour])
			if w.revise {
				t.revise(&s, unixNow)
			}
			dst = append(dst, s)
			continue
		}
		if s, ok := t.daySample(b, unixNow, spikes[(b-w.first)/hour:], w.revise); ok {
			dst = append(dst, s)
		}
	}
	return dst, spikes
}

// elapsed is the fraction of bucket [b, b+size) that has passed at now,
// at least 2% so the current bucket is never empty.
func elapsed(b, size, now int64) float64 {
	f := float64(now-b) / float64(size)
	return min(max(f, 0.02), 1)
}

// daySample aggregates the hours of day b that have started by now; spikes
// holds spikeFactor for the hours from b on. The current hour is never
// missing. revise applies the late-count revisions to each hour.
func (t *topicInfo) daySample(b, now int64, spikes []float64, revise bool) (sample, bool) {
	cur := alignDown(now, hour)
	agg := sample{time: b}
	var n int
	var sentW, sentSum, socialSum float64
	for h := b; h < b+day && h <= now; h += hour {
		if h < cur && t.missing(h) {
			continue
		}
		s := t.hourSample(h, elapsed(h, hour, now), spikes[(h-b)/hour])
		if revise {
			t.revise(&s, now)
		}
		if n == 0 {
			agg.open, agg.high, agg.low = s.open, s.high, s.low
		}
		n++
		agg.contribActive += s.contribActive
		agg.contribCreated += s.contribCreated
		agg.interactions += s.interactions
		agg.postsActive += s.postsActive
		agg.postsCreated += s.postsCreated
		agg.spam += s.spam
		w := float64(s.interactions) + 1
		sentW += w
		sentSum += w * float64(s.sentiment)
		socialSum += s.socialDom
		agg.high = max(agg.high, s.high)
		agg.low = min(agg.low, s.low)
		agg.close, agg.supply, agg.marketCap = s.close, s.supply, s.marketCap
		agg.marketDom, agg.volume = s.marketDom, s.volume
		agg.altRank, agg.galaxy = s.altRank, s.galaxy
	}
	if n == 0 {
		return agg, false
	}
	// The same accounts and posts are active in many hours of a day.
	agg.contribActive = agg.contribActive * 45 / 100
	agg.postsActive = agg.postsActive * 60 / 100
	agg.sentiment = int64(math.Round(sentSum / sentW))
	agg.socialDom = socialSum / float64(n)
	return agg, true
}

// reviseSpan is how long a closed hour keeps being revised under
// Options.Revise; reviseStep is how often its values change.
const (
	reviseSpan = 2 * hour
	reviseStep = int64(60)
)

// revise scales the social counts of hour s.time as they are known at now,
// for an upstream that counts interactions late: until the hour closes, a
// per-(topic, hour) share of 4-12% of its counts is still uncounted; in the
// reviseSpan after it closes that share arrives, front-loaded, in steps of
// one minute; after that the hour is final and equals the unrevised
// sample. The current hour carries the whole deficit so that closing does
// not make its values drop. Market fields (prices, supply) are not revised.
func (t *topicInfo) revise(s *sample, now int64) {
	closed := s.time + hour
	if now >= closed+reviseSpan {
		return
	}
	deficit := 0.04 + 0.08*unit(hash3(t.key, uint64(s.time), tagRevise))
	left := 1.0 // share of the deficit still outstanding
	if now >= closed {
		steps := float64(reviseSpan / reviseStep)
		k := float64((now - closed) / reviseStep)
		left = (steps - k) / steps
		left *= left
	}
	f := 1 - deficit*left
	scale := func(x int64) int64 { return int64(float64(x) * f) }
	s.interactions = scale(s.interactions)
	s.contribActive = scale(s.contribActive)
	s.contribCreated = scale(s.contribCreated)
	s.postsActive = scale(s.postsActive)
	s.postsCreated = scale(s.postsCreated)
	s.spam = scale(s.spam)
}

// listStats are one topic's topics-list numbers for the hour containing now.
type listStats struct {
	rank1h, rank24h                      int64
	contributors, posts, interactions24h int64
}

func (t *topicInfo) listStats(now int64, total int) listStats {
	cur := alignDown(now, hour)
	h := hash3(t.key, uint64(cur), tagList)
	move := func(x uint64, spread int64) int64 {
		r := int64(t.rank) + int64(x%uint64(2*spread+1)) - spread
		return min(max(r, 1), int64(total)+spread)
	}
	spread := int64(1 + t.rank/10)
	sp := t.spikeFactor(cur)
	return listStats{
		rank1h:          move(h, spread/2+1),
		rank24h:         move(h>>20, spread*2),
		contributors:    int64(t.contributors24 * math.Sqrt(sp) * noise(mix(h^1), 0.2)),
		posts:           int64(t.posts24 * math.Sqrt(sp) * noise(mix(h^2), 0.2)),
		interactions24h: int64(t.interactions24 * math.Pow(sp, 0.5) * noise(mix(h^3), 0.3)),
	}
}
