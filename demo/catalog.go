package demo

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// maxTopics bounds Options.Topics; the name generator and the per-topic
// profiles are built eagerly in New.
const maxTopics = 10000

// asset holds the market identity and the base levels of an asset topic.
// Topics without an asset carry social fields only.
type asset struct {
	name      string
	symbol    string
	price     float64 // typical USD price
	supply    float64 // circulating supply at epochRef
	growth    float64 // yearly relative supply growth
	dominance float64 // typical market dominance, percent
	socialDom float64 // typical social dominance, percent
	volume    float64 // typical 24 h USD volume
	altRank   float64 // typical alt rank
}

// fixedTopic is a well-known topic placed at a preferred rank.
type fixedTopic struct {
	topic string
	title string
	rank  int
	asset *asset
}

// fixedTopics are the famous topics every catalogue contains (as far as
// Options.Topics allows), in preferred-rank order.
var fixedTopics = []fixedTopic{
	{topic: "youtube", title: "YouTube", rank: 1},
	{topic: "donald trump", title: "Donald Trump", rank: 3},
	{topic: "bitcoin", title: "Bitcoin", rank: 27, asset: &asset{
		name: "Bitcoin", symbol: "BTC", price: 114000, supply: 19_930_000, growth: 0.008,
		dominance: 60.5, socialDom: 24, volume: 48e9, altRank: 200}},
	{topic: "ethereum", title: "Ethereum", rank: 41, asset: &asset{
		name: "Ethereum", symbol: "ETH", price: 4100, supply: 120_700_000, growth: 0.001,
		dominance: 12.4, socialDom: 9.5, volume: 29e9, altRank: 150}},
	{topic: "xrp", title: "XRP", rank: 58, asset: &asset{
		name: "XRP", symbol: "XRP", price: 2.61, supply: 59_900_000_000, growth: 0.04,
		dominance: 4.1, socialDom: 4.2, volume: 5.2e9, altRank: 320}},
	{topic: "solana", title: "Solana", rank: 66, asset: &asset{
		name: "Solana", symbol: "SOL", price: 192, supply: 545_000_000, growth: 0.05,
		dominance: 2.7, socialDom: 5.1, volume: 6.8e9, altRank: 90}},
	{topic: "dogecoin", title: "Dogecoin", rank: 95, asset: &asset{
		name: "Dogecoin", symbol: "DOGE", price: 0.231, supply: 150_800_000_000, growth: 0.033,
		dominance: 0.9, socialDom: 2.6, volume: 2.1e9, altRank: 410}},
	{topic: "cardano", title: "Cardano", rank: 130, asset: &asset{
		name: "Cardano", symbol: "ADA", price: 0.74, supply: 36_500_000_000, growth: 0.02,
		dominance: 0.7, socialDom: 1.3, volume: 9.5e8, altRank: 520}},
	{topic: "#ai", title: "#AI", rank: 150},
	{topic: "openai", title: "OpenAI", rank: 170},
	{topic: "ai agents", title: "AI Agents", rank: 210},
	{topic: "$capitalism", title: "$CAPITALISM", rank: 280},
}

// words feed the generated topic names.
var words = []string{
	"solar", "climate", "football", "election", "memecoins", "gaming", "nft", "defi",
	"stocks", "gold", "oil", "housing", "layoffs", "startup", "quantum", "robotics",
	"space", "rocket", "vaccine", "music", "movie", "anime", "esports", "marathon",
	"olympics", "tennis", "fashion", "coffee", "travel", "airline", "privacy", "chips",
	"cloud", "crypto", "mining", "staking", "token", "wallet", "exchange", "stablecoin",
	"inflation", "rates", "bonds", "tariffs", "recession", "jobs", "earnings", "ipo",
	"podcast", "streaming", "creator", "influencer", "meme", "viral", "drama", "summit",
	"protest", "storm", "wildfire", "earthquake", "ocean", "energy", "nuclear", "battery",
}

// topicInfo is everything the generator needs to know about one topic. It
// is built in New and read-only afterwards.
type topicInfo struct {
	topic string
	title string
	rank  int
	asset *asset
	key   uint64 // seed-specific hash of the topic

	// Daily (list) magnitudes at the diurnal mean.
	contributors24 float64
	posts24        float64
	interactions24 float64

	// Hourly series magnitudes at the diurnal mean.
	hInteractions float64
	hContribs     float64
	hPosts        float64
	hCreated      float64
	sentiment     float64
	missPerMille  uint64
	galaxyBase    float64
	phases        [4]float64 // price-path phases (assets)
}

// buildCatalog returns n topics in rank order (ranks 1..n) for seed.
func buildCatalog(seed uint64, n int) ([]*topicInfo, error) {
	if n <= 0 || n > maxTopics {
		return nil, fmt.Errorf("demo: topics %d out of range 1..%d", n, maxTopics)
	}
	fixed := fixedTopics
	if len(fixed) > n {
		fixed = fixed[:n]
	}
	// Place the fixed topics at their preferred ranks, squeezed so that
	// they all fit and stay strictly increasing.
	slots := make([]*topicInfo, n)
	prev := 0
	for i, f := range fixed {
		pos := min(f.rank, n-(len(fixed)-1-i))
		pos = max(pos, prev+1)
		prev = pos
		slots[pos-1] = &topicInfo{topic: f.topic, title: f.title, asset: f.asset}
	}
	used := make(map[string]bool, n)
	for _, f := range fixed {
		used[f.topic] = true
	}
	i := uint64(0)
	for pos := range slots {
		if slots[pos] != nil {
			continue
		}
		for {
			name := generatedName(seed, i)
			i++
			if !used[name] {
				used[name] = true
				slots[pos] = &topicInfo{topic: name, title: titleOf(name)}
				break
			}
		}
	}
	for pos, t := range slots {
		t.rank = pos + 1
		profile(seed, t)
	}
	return slots, nil
}

// generatedName is the i-th candidate name for seed. Candidates may repeat;
// the caller skips duplicates. Past the first few thousand candidates a
// number is appended so the supply never runs out.
func generatedName(seed, i uint64) string {
	h := hash3(seed, i, tagName)
	a := words[h%uint64(len(words))]
	b := words[(h>>16)%uint64(len(words))]
	var name string
	switch (h >> 32) % 10 {
	case 0, 1, 2:
		name = a
	case 3, 4:
		name = "#" + a
	case 5:
		name = "$" + a
	default:
		if a == b {
			name = a
		} else {
			name = a + " " + b
		}
	}
	if i >= 4000 {
		name += " " + strconv.FormatUint(i, 10)
	}
	return name
}

// titleOf is the display title of a generated topic name: words are
// capitalised, cashtags are upper-cased.
func titleOf(topic string) string {
	if strings.HasPrefix(topic, "$") {
		return strings.ToUpper(topic)
	}
	parts := strings.Split(topic, " ")
	for i, p := range parts {
		j := 0
		if strings.HasPrefix(p, "#") {
			j = 1
		}
		if len(p) > j {
			parts[i] = p[:j] + strings.ToUpper(p[j:j+1]) + p[j+1:]
		}
	}
	return strings.Join(parts, " ")
}

// profile fills the magnitudes of t from its rank, with a per-topic jitter,
// calibrated on the facts document: rank 1 about 340k contributors, 700k
// posts and 3.1e9 interactions a day; rank ~27 about 90k, 300k and 1.4e8.
func profile(seed uint64, t *topicInfo) {
	t.key = hash3(seed, fnv64(t.topic), tagTopic)
	r := float64(t.rank)
	j := func(tag uint64) float64 { return 0.75 + 0.5*unit(hash3(t.key, tag, tagProfile)) }
	t.contributors24 = 340000 * math.Pow(r, -0.45) * j(1)
	t.posts24 = 700000 * math.Pow(r, -0.35) * j(2)
	t.interactions24 = 3.1e9 * math.Pow(r, -0.95) * j(3)
	t.hInteractions = t.interactions24 / 24 * 0.8
	t.hContribs = t.contributors24 * 0.25
	t.hPosts = t.posts24 * 0.13
	t.hCreated = t.hPosts * 0.045
	t.sentiment = 62 + 22*unit(hash3(t.key, 4, tagProfile))
	t.galaxyBase = 45 + 15*unit(hash3(t.key, 5, tagProfile))
	for i := range t.phases {
		t.phases[i] = 2 * math.Pi * unit(hash3(t.key, uint64(11+i), tagProfile))
	}
	t.missPerMille = 3
	if t.rank > 100 {
		t.missPerMille = 25
	}
}

// catalog indexes topics by name.
type catalog struct {
	list   []*topicInfo
	byName map[string]*topicInfo
	names  []string
}

func newCatalog(seed uint64, n int) (*catalog, error) {
	list, err := buildCatalog(seed, n)
	if err != nil {
		return nil, err
	}
	c := &catalog{list: list, byName: make(map[string]*topicInfo, len(list)), names: make([]string, len(list))}
	for i, t := range list {
		if c.byName[t.topic] != nil {
			return nil, errors.New("demo: duplicate topic " + t.topic)
		}
		c.byName[t.topic] = t
		c.names[i] = t.topic
	}
	if !sort.SliceIsSorted(list, func(a, b int) bool { return list[a].rank < list[b].rank }) {
		return nil, errors.New("demo: catalogue not in rank order")
	}
	return c, nil
}
