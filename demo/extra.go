package demo

import (
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// The upstream's other read endpoints the demo serves, for the gateway's
// configured routes (docs/routes.md): the coins list, a topic's posts and
// the creators list. Their shapes follow the documented field lists: a
// "data" array of flat objects and a "config" object with "generated".

// Hash tags of the extra endpoints' random streams.
const (
	tagCoin uint64 = 100 + iota
	tagCreator
	tagPost
)

// coinStats is one coin's row of the coins list at an hour.
type coinStats struct {
	id                                    int64
	symbol, name                          string
	price, volume, supply, marketCap      float64
	change1h, change24h, change7d         float64
	interactions, socialDom, marketDom    float64
	galaxy, sentiment                     float64
	altRank, marketCapRank, lastUpdatedAt int64
}

// coins returns the asset topics' coins at now, ranked by market cap.
func (c *catalog) coins(seed uint64, now int64) []coinStats {
	cur := alignDown(now, hour)
	var out []coinStats
	for _, t := range c.list {
		a := t.asset
		if a == nil {
			continue
		}
		h := hash3(t.key, uint64(cur), tagCoin)
		price := a.price * noise(h, 0.06)
		supply := a.supply * (1 + a.growth*float64(now-epochRef)/float64(365*day))
		out = append(out, coinStats{
			id:            int64(hash3(seed, fnv64(a.symbol), tagCoin)%9000 + 1),
			symbol:        a.symbol,
			name:          a.name,
			price:         price,
			volume:        a.volume * noise(mix(h^1), 0.4),
			supply:        supply,
			marketCap:     price * supply,
			change1h:      (unit(mix(h^2)) - 0.5) * 2,
			change24h:     (unit(mix(h^3)) - 0.5) * 8,
			change7d:      (unit(mix(h^4)) - 0.5) * 20,
			interactions:  t.interactions24 * noise(mix(h^5), 0.3),
			socialDom:     a.socialDom * noise(mix(h^6), 0.2),
			marketDom:     a.dominance * noise(mix(h^7), 0.02),
			galaxy:        40 + 30*unit(mix(h^8)),
			sentiment:     60 + 30*unit(mix(h^9)),
			altRank:       int64(a.altRank * noise(mix(h^10), 0.5)),
			lastUpdatedAt: cur + int64(mix(h^11)%600),
		})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].marketCap > out[j].marketCap })
	for i := range out {
		out[i].marketCapRank = int64(i + 1)
	}
	return out
}

// coinSorts are the coins list's sort keys, each ascending by default
// (ranks first), as the upstream sorts.
var coinSorts = map[string]func(a, b *coinStats) bool{
	"market_cap_rank":  func(a, b *coinStats) bool { return a.marketCapRank < b.marketCapRank },
	"alt_rank":         func(a, b *coinStats) bool { return a.altRank < b.altRank },
	"galaxy_score":     func(a, b *coinStats) bool { return a.galaxy > b.galaxy },
	"interactions":     func(a, b *coinStats) bool { return a.interactions > b.interactions },
	"social_dominance": func(a, b *coinStats) bool { return a.socialDom > b.socialDom },
	"volume_24h":       func(a, b *coinStats) bool { return a.volume > b.volume },
	"price":            func(a, b *coinStats) bool { return a.price > b.price },
}

// coinsQuery is the coins list's query: sort, desc, limit and page, with
// the upstream's defaults (market_cap_rank, 10 per page, page 0).
type coinsQuery struct {
	sort        string
	desc        bool
	limit, page int
}

// parseCoinsQuery reads raw; msg is the upstream-style error text of a
// bad value. Unknown parameters are ignored, as the upstream ignores them.
func parseCoinsQuery(raw string) (q coinsQuery, msg string) {
	q = coinsQuery{sort: "market_cap_rank", limit: 10}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, "Invalid query string"
	}
	if v := vals.Get("sort"); v != "" {
		if coinSorts[v] == nil {
			return q, "Invalid sort"
		}
		q.sort = v
	}
	q.desc = vals.Get("desc") == "true" || vals.Get("desc") == "1"
	if v := vals.Get("limit"); v != "" {
		if q.limit, err = strconv.Atoi(v); err != nil || q.limit < 1 || q.limit > 1000 {
			return q, "Invalid limit"
		}
	}
	if v := vals.Get("page"); v != "" {
		if q.page, err = strconv.Atoi(v); err != nil || q.page < 0 {
			return q, "Invalid page"
		}
	}
	return q, ""
}

// appendCoins renders the page of coins q selects.
func appendCoins(b []byte, coins []coinStats, q coinsQuery, generated int64) []byte {
	less := coinSorts[q.sort]
	sort.SliceStable(coins, func(i, j int) bool {
		if q.desc {
			return less(&coins[j], &coins[i])
		}
		return less(&coins[i], &coins[j])
	})
	from := min(q.page*q.limit, len(coins))
	page := coins[from:min(from+q.limit, len(coins))]
	b = append(b, `{"config":{"sort":`...)
	b = appendString(b, q.sort)
	b = appendIntField(b, "limit", int64(q.limit))
	b = appendIntField(b, "page", int64(q.page))
	b = appendIntField(b, "total_rows", int64(len(coins)))
	b = appendIntField(b, "generated", generated)
	b = append(b, `},"data":[`...)
	for i := range page {
		c := &page[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = strconv.AppendInt(b, c.id, 10)
		b = append(b, `,"symbol":`...)
		b = appendString(b, c.symbol)
		b = append(b, `,"name":`...)
		b = appendString(b, c.name)
		b = appendFloatField(b, "price", c.price, 6)
		b = appendFloatField(b, "volume_24h", c.volume, 8)
		b = appendFloatField(b, "circulating_supply", c.supply, 8)
		b = appendFloatField(b, "market_cap", c.marketCap, 8)
		b = appendFloatField(b, "percent_change_1h", c.change1h, 4)
		b = appendFloatField(b, "percent_change_24h", c.change24h, 4)
		b = appendFloatField(b, "percent_change_7d", c.change7d, 4)
		b = appendIntField(b, "market_cap_rank", c.marketCapRank)
		b = appendFloatField(b, "interactions_24h", c.interactions, 8)
		b = appendFloatField(b, "social_dominance", c.socialDom, 4)
		b = appendFloatField(b, "market_dominance", c.marketDom, 4)
		b = appendFloatField(b, "galaxy_score", c.galaxy, 3)
		b = appendIntField(b, "alt_rank", c.altRank)
		b = appendFloatField(b, "sentiment", c.sentiment, 3)
		b = appendIntField(b, "last_updated_price", c.lastUpdatedAt)
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// creatorNetworks are the social networks creators post on.
var creatorNetworks = []string{"twitter", "youtube", "reddit", "tiktok", "instagram"}

// numCreators is the size of the demo's creator population.
const numCreators = 100

// creator is one social account of the demo's population.
type creator struct {
	id, name, display, network string
	followers                  int64
}

// creatorAt returns creator i (0 <= i < numCreators) of seed's population:
// lower indexes have more followers.
func creatorAt(seed uint64, i int) creator {
	h := hash3(seed, uint64(i), tagCreator)
	name := words[h%uint64(len(words))] + "_" + words[(h>>16)%uint64(len(words))] + strconv.Itoa(int(h>>40)%100)
	return creator{
		id:        strconv.FormatUint(1e9+(h>>20)%9e9, 10),
		name:      name,
		display:   titleOf(strings.ReplaceAll(name, "_", " ")),
		network:   creatorNetworks[(h>>8)%uint64(len(creatorNetworks))],
		followers: int64(5e6 / math.Pow(float64(i+1), 0.9) * noise(mix(h^1), 0.3)),
	}
}

// appendCreators renders the creators list at now: the population ranked
// by their interactions over the last 24 hours.
func appendCreators(b []byte, seed uint64, now, generated int64) []byte {
	cur := alignDown(now, hour)
	type row struct {
		c            creator
		interactions int64
		posts        int64
	}
	rows := make([]row, numCreators)
	for i := range rows {
		c := creatorAt(seed, i)
		h := hash3(seed, uint64(i)^uint64(cur), tagCreator)
		rows[i] = row{c, int64(float64(c.followers) * 0.8 * noise(h, 1.2)), int64(1 + h%40)}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].interactions > rows[j].interactions })
	b = append(b, `{"config":{"generated":`...)
	b = strconv.AppendInt(b, generated, 10)
	b = append(b, `},"data":[`...)
	for i, r := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"creator_id":`...)
		b = appendString(b, r.c.id)
		b = append(b, `,"creator_name":`...)
		b = appendString(b, r.c.name)
		b = append(b, `,"creator_display_name":`...)
		b = appendString(b, r.c.display)
		b = append(b, `,"creator_network":`...)
		b = appendString(b, r.c.network)
		b = appendIntField(b, "creator_followers", r.c.followers)
		b = appendIntField(b, "creator_rank", int64(i+1))
		b = appendIntField(b, "interactions_24h", r.interactions)
		b = appendIntField(b, "creator_posts", r.posts)
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// postTypes are the kinds of posts a topic's posts list mixes.
var postTypes = []string{"tweet", "youtube-video", "reddit-post", "tiktok-video", "news"}

// postsPerTopic is how many posts a topic's posts list holds.
const postsPerTopic = 25

// appendPosts renders topic's top posts at now (t nil: an unknown topic,
// whose list is empty, as the upstream answers).
func appendPosts(b []byte, seed uint64, topic string, t *topicInfo, now, generated int64) []byte {
	b = append(b, `{"config":{"topic":`...)
	b = appendString(b, topic)
	b = appendIntField(b, "generated", generated)
	b = append(b, `},"data":[`...)
	if t != nil {
		cur := alignDown(now, hour)
		for i := range postsPerTopic {
			h := hash3(t.key, uint64(cur)+uint64(i), tagPost)
			c := creatorAt(seed, int(h%numCreators))
			kind := postTypes[(h>>8)%uint64(len(postTypes))]
			id := strconv.FormatUint(1e18+(h>>4)%8e18, 10)
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, id)
			b = append(b, `,"post_type":`...)
			b = appendString(b, kind)
			b = append(b, `,"post_title":`...)
			b = appendString(b, t.title+": "+words[(h>>20)%uint64(len(words))]+" "+words[(h>>28)%uint64(len(words))])
			b = append(b, `,"post_link":`...)
			b = appendString(b, "https://example.com/"+c.network+"/"+c.name+"/"+id)
			b = appendIntField(b, "post_created", cur-int64(h>>36)%(2*day))
			b = appendFloatField(b, "post_sentiment", 1+4*unit(mix(h^1)), 3)
			b = append(b, `,"creator_id":`...)
			b = appendString(b, c.id)
			b = append(b, `,"creator_name":`...)
			b = appendString(b, c.name)
			b = append(b, `,"creator_display_name":`...)
			b = appendString(b, c.display)
			b = append(b, `,"creator_network":`...)
			b = appendString(b, c.network)
			b = append(b, `,"creator_followers":`...)
			b = strconv.AppendInt(b, c.followers, 10)
			b = appendIntField(b, "interactions_24h", int64(t.interactions24/200*noise(mix(h^2), 2)))
			b = appendIntField(b, "interactions_total", int64(t.interactions24/100*noise(mix(h^3), 2)))
			b = append(b, '}')
		}
	}
	return append(b, "]}\n"...)
}
