package demo

import (
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json does.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// appendKey appends `,"name":` (without the comma when first is true).
func appendKey(b []byte, name string, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendIntField(b []byte, name string, v int64) []byte {
	return strconv.AppendInt(appendKey(b, name, false), v, 10)
}

// appendFloatField appends v rounded to sig significant digits (at least
// the integer part), in plain decimal notation.
func appendFloatField(b []byte, name string, v float64, sig int) []byte {
	return strconv.AppendFloat(appendKey(b, name, false), roundSig(v, sig), 'f', -1, 64)
}

// pow10 holds 1e0..1e19 for roundSig.
var pow10 = func() (p [20]float64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// roundSig rounds v to sig significant digits, never below whole units.
// It avoids math.Log10: this runs for every float in every row.
func roundSig(v float64, sig int) float64 {
	a := math.Abs(v)
	if a == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	// intDigits is the number of digits before the point (<= 0 below 1).
	intDigits := 0
	for intDigits < len(pow10) && a >= pow10[intDigits] {
		intDigits++
	}
	if a < 1 {
		for x := a * 10; x < 1 && intDigits > -(len(pow10)-1); x *= 10 {
			intDigits--
		}
	}
	digits := sig - intDigits
	switch {
	case digits <= 0:
		return math.Round(v)
	case digits >= len(pow10):
		return v
	}
	p := pow10[digits]
	return math.Round(v*p) / p
}

// appendRow appends one time-series data point; market fields only for
// assets.
func appendRow(b []byte, s *sample, isAsset bool) []byte {
	b = append(b, `{"time":`...)
	b = strconv.AppendInt(b, s.time, 10)
	b = appendIntField(b, "contributors_active", s.contribActive)
	b = appendIntField(b, "contributors_created", s.contribCreated)
	b = appendIntField(b, "interactions", s.interactions)
	b = appendIntField(b, "posts_active", s.postsActive)
	b = appendIntField(b, "posts_created", s.postsCreated)
	b = appendIntField(b, "sentiment", s.sentiment)
	b = appendIntField(b, "spam", s.spam)
	if isAsset {
		b = appendIntField(b, "alt_rank", s.altRank)
		b = appendIntField(b, "circulating_supply", int64(s.supply))
		b = appendFloatField(b, "close", s.close, 7)
		b = appendIntField(b, "galaxy_score", s.galaxy)
		b = appendFloatField(b, "high", s.high, 7)
		b = appendFloatField(b, "low", s.low, 7)
		b = appendIntField(b, "market_cap", int64(s.marketCap))
		b = appendFloatField(b, "market_dominance", s.marketDom, 4)
		b = appendFloatField(b, "open", s.open, 7)
		b = appendFloatField(b, "social_dominance", s.socialDom, 3)
		b = appendIntField(b, "volume_24h", int64(s.volume))
	}
	return append(b, '}')
}

// appendSeries renders a whole time-series response.
func appendSeries(b []byte, topic string, t *topicInfo, w window, generated int64, rows []sample) []byte {
	b = appendConfigHead(b, topic, t, true)
	if w.interval != "" {
		b = append(b, `,"interval":`...)
		b = appendString(b, w.interval)
	}
	b = appendIntField(b, "start", w.start)
	b = appendIntField(b, "end", w.end)
	if w.bucket == hour {
		b = append(b, `,"bucket":"hour"`...)
	} else {
		b = append(b, `,"bucket":"day"`...)
	}
	b = append(b, `,"metrics":[]`...)
	b = appendIntField(b, "generated", generated)
	b = append(b, `},"data":[`...)
	isAsset := t != nil && t.asset != nil
	for i := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRow(b, &rows[i], isAsset)
	}
	return append(b, "]}\n"...)
}

// appendConfigHead opens the config object with topic and, for assets,
// id, name and symbol; alwaysID adds id for non-assets too (time series).
// t is nil for unknown topics.
func appendConfigHead(b []byte, topic string, t *topicInfo, alwaysID bool) []byte {
	b = append(b, `{"config":{"topic":`...)
	b = appendString(b, topic)
	isAsset := t != nil && t.asset != nil
	if alwaysID || isAsset {
		b = append(b, `,"id":`...)
		b = appendString(b, topic)
	}
	if isAsset {
		b = append(b, `,"name":`...)
		b = appendString(b, t.asset.name)
		b = append(b, `,"symbol":`...)
		b = appendString(b, t.asset.symbol)
	}
	return b
}

// appendList renders the topics list for now.
func appendList(b []byte, c *catalog, now int64) []byte {
	b = append(b, `{"data":[`...)
	for i, t := range c.list {
		if i > 0 {
			b = append(b, ',')
		}
		st := t.listStats(now, len(c.list))
		b = append(b, `{"topic":`...)
		b = appendString(b, t.topic)
		b = append(b, `,"title":`...)
		b = appendString(b, t.title)
		b = appendIntField(b, "topic_rank", int64(t.rank))
		b = appendIntField(b, "topic_rank_1h_previous", st.rank1h)
		b = appendIntField(b, "topic_rank_24h_previous", st.rank24h)
		b = appendIntField(b, "num_contributors", st.contributors)
		b = appendIntField(b, "num_posts", st.posts)
		b = appendIntField(b, "interactions_24h", st.interactions24h)
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// tsvMetrics are the metrics served as raw TSV downloads.
var tsvMetrics = map[string]func(*sample) int64{
	"interactions":        func(s *sample) int64 { return s.interactions },
	"posts_active":        func(s *sample) int64 { return s.postsActive },
	"contributors_active": func(s *sample) int64 { return s.contribActive },
	"sentiment":           func(s *sample) int64 { return s.sentiment },
}

// appendTSV renders the hours of w (see tsvWindow) of metric for t at now
// (nil t: header only).
func appendTSV(b []byte, metric string, t *topicInfo, w window, now time.Time) []byte {
	b = append(b, "time\t"...)
	b = append(b, metric...)
	b = append(b, '\n')
	if t == nil {
		return b
	}
	get := tsvMetrics[metric]
	var buf [24]sample
	var spikes [24]float64
	rows, _ := t.rows(w, now, buf[:0], spikes[:0])
	for _, s := range rows {
		b = time.Unix(s.time, 0).UTC().AppendFormat(b, "2006-01-02 15:04")
		b = append(b, '\t')
		b = strconv.AppendInt(b, get(&s), 10)
		b = append(b, '\n')
	}
	return b
}

// Whatsup prose. {T} is the topic title, {S} a second subject.
var (
	openers = []string{
		"Social chatter around {T} picked up sharply over the last day as a widely shared thread drew new attention to the topic.",
		"Conversation about {T} is dominated by reactions to fresh news, with large accounts amplifying both the headlines and the doubts.",
		"Posts mentioning {T} are running above their weekly average, driven by a viral clip and a burst of commentary from creators.",
		"{T} is trending again as users weigh a new announcement against the scepticism that followed earlier promises.",
	}
	middles = []string{
		"Supporters point to growing adoption and a steady stream of partnerships, arguing that momentum around {T} is still building.",
		"Several threads compare the current mood with previous cycles and note that engagement is broader than it was a month ago.",
		"Discussion of {S} keeps spilling over into the {T} community, where many posts link the two stories together.",
		"Analysts and hobbyists alike are sharing charts and screenshots, and the most liked replies ask for concrete numbers.",
		"A cluster of posts highlights real-world use cases, while others question whether the excitement will survive the week.",
	}
	closers = []string{
		"Critics warn that much of the hype is recycled and that a few large accounts are responsible for most of the reach.",
		"Some users remain cautious, citing unanswered questions about costs, regulation and the long-term plan behind {T}.",
		"Overall sentiment stays mostly positive, although a vocal minority expects the attention to fade as quickly as it arrived.",
		"Spam and bot replies are noticeable in the busiest threads, which makes the genuine debate around {T} harder to follow.",
	}
	subjects  = []string{"regulation", "the broader market", "big tech", "new product launches", "creator payouts", "interest rates"}
	supTitles = []string{"Growing adoption", "Institutional interest", "Community momentum", "Product progress", "Creator enthusiasm", "Strong engagement"}
	criTitles = []string{"Hype fatigue", "Regulatory worries", "Bot activity", "Cost concerns", "Execution doubts", "Concentrated reach"}
	supDescs  = []string{
		"Posts highlight new users and partners joining around {T}.",
		"Large accounts describe {T} as gaining lasting traction.",
		"Threads share examples of {T} being used in practice.",
	}
	criDescs = []string{
		"Some users doubt that attention on {T} will last beyond the news cycle.",
		"Replies question the claims made about {T} and ask for evidence.",
		"Concern that a few accounts drive most of the {T} conversation.",
	}
)

// theme is one supportive or critical whatsup theme.
type theme struct {
	title, description string
	percent            int64
}

// whatsupText builds a 400-600 character summary and 1-3 themes of each
// kind for t, deterministic in (key, generation hour).
func whatsupText(t *topicInfo, genHour int64) (string, []theme, []theme) {
	h := hash3(t.key, uint64(genHour), tagWhatsup)
	pick := func(list []string, salt uint64) string { return list[mix(h^salt)%uint64(len(list))] }
	fill := func(s string) string {
		s = strings.ReplaceAll(s, "{T}", t.title)
		return strings.ReplaceAll(s, "{S}", pick(subjects, 99))
	}
	pool := [][]string{openers, middles, middles, closers, middles, closers}
	var sb strings.Builder
	used := map[string]bool{}
	for i, list := range pool {
		if sb.Len() >= 400 {
			break
		}
		for k := uint64(0); k < uint64(len(list)); k++ {
			s := fill(list[(mix(h^uint64(i+1))+k)%uint64(len(list))])
			if used[s] || sb.Len()+1+len(s) > 600 {
				continue
			}
			used[s] = true
			if sb.Len() > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(s)
			break
		}
	}
	// Themes: distinct titles, the first the largest share, each later
	// one at most as large as the one before.
	themes := func(titles, descs []string, salt uint64, lo, hi int64) []theme {
		x := mix(h ^ salt)
		n := 1 + int(x%3)
		base, dbase := int(x>>8), int(x>>24)
		out := make([]theme, 0, n)
		pct := lo + int64((x>>40)%uint64(hi-lo+1))
		for i := 0; i < n; i++ {
			out = append(out, theme{
				title:       titles[(base+i)%len(titles)],
				description: fill(descs[(dbase+i)%len(descs)]),
				percent:     pct,
			})
			pct = 1 + int64(mix(x+uint64(i))%uint64(pct))
		}
		return out
	}
	return sb.String(), themes(supTitles, supDescs, 1000, 15, 60), themes(criTitles, criDescs, 2000, 5, 35)
}

// appendWhatsup renders a whatsup response; t nil means an unknown topic
// (empty summary, no themes).
func appendWhatsup(b []byte, topic string, t *topicInfo, generated int64) []byte {
	b = appendConfigHead(b, topic, t, false)
	b = appendIntField(b, "generated", generated)
	b = append(b, '}')
	if t == nil {
		return append(b, ",\"summary\":\"\"}\n"...)
	}
	summary, sup, cri := whatsupText(t, alignDown(generated, hour))
	b = append(b, `,"summary":`...)
	b = appendString(b, summary)
	for _, group := range []struct {
		name   string
		themes []theme
	}{{"supportive", sup}, {"critical", cri}} {
		b = appendKey(b, group.name, false)
		b = append(b, '[')
		for i, th := range group.themes {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"title":`...)
			b = appendString(b, th.title)
			b = append(b, `,"description":`...)
			b = appendString(b, th.description)
			b = appendIntField(b, "percent", th.percent)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}
