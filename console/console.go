// Package console is the operator's console of a gateway: per-key and
// per-account usage (GET /keys, GET /accounts), the dashboard summary
// (GET /summary) and the per-key and per-account quota gauges, all read at
// request or scrape time from the settings in force, the limiter's
// counters and the recent traffic. The hit path only bumps counters
// (package activity) and notes the largest quota shares (Observe).
package console

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"trendgate/activity"
	"trendgate/admin"
	"trendgate/cache"
	"trendgate/config"
	"trendgate/internal/buildinfo"
	"trendgate/internal/clock"
	"trendgate/internal/tenantlabel"
	"trendgate/limits"
	"trendgate/proxy"
	"trendgate/upstream"
)

var (
	_ admin.UsageSource   = (*Console)(nil)
	_ admin.SummarySource = (*Console)(nil)
)

// RevokedKeys lists the keys revoked through the key API whose
// tombstones are kept (keyservice.Service.RevokedKeys).
type RevokedKeys interface {
	RevokedKeys(only string, inForce func(id string) bool) []admin.KeyUsage
}

// Options are what the console reads.
type Options struct {
	// Settings returns the settings in force.
	Settings func() *proxy.Settings
	Clock    clock.Clock
	Log      *zap.Logger
	// Usage reads the limiter's counters.
	Usage limits.UsageReader
	// Activity is the recent traffic.
	Activity *activity.Recorder
	// Upstream is the upstream client: its breaker, budget and shares.
	Upstream proxy.Upstream
	// Local is the in-process cache tier; nil for none.
	Local *cache.Local
	// Revoked lists the revoked keys' tombstones.
	Revoked RevokedKeys
	// LastUsed is the keys' last use shared among instances; nil
	// without cluster mode.
	LastUsed *activity.LastUsed
	// Reload is the latest reload's outcome.
	Reload func() admin.ReloadStatus
	// Labels bounds the quota gauges' accounts and keys.
	Labels *tenantlabel.Labels
}

// Console serves the admin views of one gateway. Build it with New.
type Console struct {
	settings     func() *proxy.Settings
	clk          clock.Clock
	log          *zap.Logger
	usage        limits.UsageReader
	act          *activity.Recorder
	up           proxy.Upstream
	local        *cache.Local
	revoked      RevokedKeys
	lastUsed     *activity.LastUsed
	reloadStatus func() admin.ReloadStatus
	labels       *tenantlabel.Labels
	// keyIdx is the admin views' index of keys and accounts
	// (keyindex.go); top the accounts using most of a quota, for the
	// summary (topquota.go).
	keyIdx keyIndexCache
	top    topQuota
}

// New builds the console from what it reads.
func New(o Options) *Console {
	return &Console{settings: o.Settings, clk: o.Clock, log: o.Log, usage: o.Usage, act: o.Activity,
		up: o.Upstream, local: o.Local, revoked: o.Revoked, lastUsed: o.LastUsed, reloadStatus: o.Reload, labels: o.Labels}
}

// Observe wraps a limiter so that every admission it grants is noted for
// the summary's top lists.
func (c *Console) Observe(next limits.Limiter) limits.Limiter { return c.top.observe(next) }

// KnownAccount reports whether id is an account in force: a configured
// account, or a key without one (a lookup in the index).
func (c *Console) KnownAccount(id string) bool {
	_, ok := c.keyIdx.of(c.settings()).account(id)
	return ok
}

// AccountOfKey returns the account of the key id in force, and false when
// no key in force has that id.
func (c *Console) AccountOfKey(id string) (string, bool) {
	rk, ok := c.keyIdx.of(c.settings()).key(id)
	return rk.Account, ok
}

// Collector is the quota gauges' collector (see quotaCollector).
func (c *Console) Collector() prometheus.Collector { return newQuotaCollector(c) }

// budgetReporter is what the console reads from the upstream client.
type budgetReporter interface {
	BudgetLeft() (minute, day int64, ok bool)
	BudgetLimits() (perMinute, perDay int)
}

// shareReporter is implemented by an upstream client that can list the
// minute's fair shares.
type shareReporter interface {
	Shares(ctx context.Context) ([]upstream.Share, error)
}

// upstreamShares returns the minute's shares for the summary; none when
// they cannot be read (logged).
func (c *Console) upstreamShares(ctx context.Context) []admin.UpstreamShare {
	out := []admin.UpstreamShare{}
	sr, ok := c.up.(shareReporter)
	if !ok {
		return out
	}
	ss, err := sr.Shares(ctx)
	if err != nil {
		c.log.Warn("reading the upstream shares failed", zap.Error(err))
		return out
	}
	for _, s := range ss {
		out = append(out, admin.UpstreamShare{Account: s.Account, Weight: s.Weight, Active: s.Active, Used: s.Used, Guaranteed: s.Guarantee})
	}
	return out
}

// topN is how many keys and topics the summary lists.
const topN = 10

// usageTimeout bounds one read of the limiter's counters (Redis in cluster
// mode, which falls back to local figures when it fails).
const usageTimeout = 2 * time.Second

// KeysPage implements admin.UsageSource: one page of keys in id order,
// found through the snapshot's index and read key by key. Keys revoked
// through the key API (their tombstones: package keyservice) are merged into the same
// id order, so one cursor pages through both.
func (c *Console) KeysPage(ctx context.Context, q admin.KeyQuery) (admin.KeyPage, error) {
	set := c.settings()
	idx := c.keyIdx.of(set)
	now := c.clk.Now()
	var places []int // ascending places in idx.keys, or nil for all keys
	if q.Account != "" {
		a, ok := idx.account(q.Account)
		if !ok {
			return admin.KeyPage{}, admin.ErrUnknownAccount
		}
		places = a.keys
	}
	// Up to Limit+1 keys in force and Limit+1 revoked ones after the
	// cursor, each in id order; the page is the first Limit of the two
	// merged, and one more tells there is a next page.
	inForce := make([]config.ResolvedKey, 0, min(q.Limit+1, 64))
	take := func(rk config.ResolvedKey) bool {
		if q.State != "" && keyState(rk, now) != q.State {
			return true
		}
		inForce = append(inForce, rk)
		return len(inForce) <= q.Limit
	}
	first := idx.keysAfter(q.After)
	if q.State != admin.StateRevoked {
		if places == nil {
			for i := first; i < len(idx.keys) && take(idx.keys[i]); i++ {
			}
		} else {
			for _, i := range places[sort.SearchInts(places, first):] {
				if !take(idx.keys[i]) {
					break
				}
			}
		}
	}
	var revoked []admin.KeyUsage
	if q.State == "" || q.State == admin.StateRevoked {
		for _, ku := range c.revoked.RevokedKeys("", idx.has) {
			if ku.ID > q.After && (q.Account == "" || ku.Account == q.Account) {
				revoked = append(revoked, ku)
			}
		}
		slices.SortFunc(revoked, func(a, b admin.KeyUsage) int { return cmp.Compare(a.ID, b.ID) })
	}
	var page []config.ResolvedKey
	var order []bool // per place in the page: true for a revoked key
	i, j := 0, 0
	for len(order) < q.Limit && (i < len(inForce) || j < len(revoked)) {
		if j == len(revoked) || (i < len(inForce) && inForce[i].Key.ID < revoked[j].ID) {
			page, order, i = append(page, inForce[i]), append(order, false), i+1
		} else {
			order, j = append(order, true), j+1
		}
	}
	more := i < len(inForce) || j < len(revoked)
	used, err := c.usageOfKeys(ctx, set, page)
	if err != nil {
		return admin.KeyPage{}, err
	}
	keys := make([]admin.KeyUsage, 0, len(order))
	ui, ri := 0, 0
	for _, isRevoked := range order {
		if isRevoked {
			keys, ri = append(keys, revoked[ri]), ri+1
		} else {
			keys, ui = append(keys, used[ui]), ui+1
		}
	}
	return admin.KeyPage{Keys: keys, More: more}, nil
}

// KeyUsage implements admin.UsageSource: a lookup in the snapshot's index,
// then among the tombstones of revoked keys.
func (c *Console) KeyUsage(ctx context.Context, id string) (admin.KeyUsage, error) {
	set := c.settings()
	idx := c.keyIdx.of(set)
	rk, ok := idx.key(id)
	if !ok {
		if ks := c.revoked.RevokedKeys(id, idx.has); len(ks) > 0 {
			return ks[0], nil // a tombstone (package keyservice)
		}
		return admin.KeyUsage{}, admin.ErrUnknownKey
	}
	ks, err := c.usageOfKeys(ctx, set, []config.ResolvedKey{rk})
	if err != nil {
		return admin.KeyUsage{}, err
	}
	return ks[0], nil
}

// AccountsPage implements admin.UsageSource: one page of accounts in id
// order, each with its quotas (read once per account) and the sum of its
// keys' traffic.
func (c *Console) AccountsPage(ctx context.Context, q admin.PageQuery) (admin.AccountPage, error) {
	ctx, cancel := context.WithTimeout(ctx, usageTimeout)
	defer cancel()
	set := c.settings()
	idx := c.keyIdx.of(set)
	now := c.clk.Now()
	first := idx.accountsAfter(q.After)
	last := min(first+q.Limit, len(idx.accounts))
	accounts := idx.accounts[first:last]
	kps := make([]limits.KeyPolicy, len(accounts))
	out := make([]admin.AccountUsage, len(accounts))
	for i := range accounts {
		a := &accounts[i]
		p := a.Policy
		p.PerSecond, p.Burst = 0, 0 // only the account's quotas are read
		kps[i] = limits.KeyPolicy{Key: idx.firstKey(a), Account: a.ID, Policy: p}
		au := admin.AccountUsage{ID: a.ID, Plan: a.Plan, Keys: make([]string, 0, len(a.keys)),
			Last24h: admin.UsageWindow{Scope: "instance", ByEndpoint: []admin.UsageCount{}}}
		for _, k := range a.keys {
			id := idx.keys[k].Key.ID
			au.Keys = append(au.Keys, id)
			ka := set.KeyActivity(id)
			if ka == nil {
				continue
			}
			win := ka.Window(now)
			w := &au.Last24h
			if w.Since.IsZero() || (!win.Since.IsZero() && win.Since.Before(w.Since)) {
				w.Since = win.Since
			}
			w.Requests += win.Requests
			w.Units += win.Units
			w.UpstreamCalls += win.UpstreamCalls
			w.UpstreamAbandoned += win.UpstreamAbandoned
		}
		out[i] = au
	}
	if len(kps) > 0 {
		us, err := c.usage.Usage(ctx, kps)
		if err != nil {
			c.log.Warn("reading account usage failed", zap.Error(err))
			return admin.AccountPage{}, fmt.Errorf("console: account usage: %w", err)
		}
		for i, u := range us {
			out[i].Source = u.Source
			out[i].Daily = quotaUsage(u.DayUsed, u.Policy.Daily, u.DayEnd)
			out[i].Monthly = quotaUsage(u.MonthUsed, u.Policy.Monthly, u.MonthEnd)
		}
	}
	return admin.AccountPage{Accounts: out, More: last < len(idx.accounts)}, nil
}

// keyState is rk's state at now: one of admin.KeyStates.
func keyState(rk config.ResolvedKey, now time.Time) string {
	switch {
	case rk.Key.Disabled:
		return "disabled"
	case rk.Key.Expires != nil && !now.Before(*rk.Key.Expires):
		return "expired"
	case rk.Key.NotBefore != nil && now.Before(*rk.Key.NotBefore):
		return "not_yet_valid"
	}
	return "active"
}

// usageOfKeys reads the usage of the keys rks of set, in their order.
func (c *Console) usageOfKeys(ctx context.Context, set *proxy.Settings, rks []config.ResolvedKey) ([]admin.KeyUsage, error) {
	ctx, cancel := context.WithTimeout(ctx, usageTimeout)
	defer cancel()
	now := c.clk.Now()
	kps := make([]limits.KeyPolicy, 0, len(rks))
	out := make([]admin.KeyUsage, 0, len(rks))
	for _, rk := range rks {
		kps = append(kps, limits.KeyPolicy{Key: rk.Key.ID, Account: rk.Account, Policy: rk.Policy})
		ku := admin.KeyUsage{ID: rk.Key.ID, Account: rk.Account, Plan: rk.Plan, State: keyState(rk, now), Expires: rk.Key.Expires,
			NotBefore: rk.Key.NotBefore, Created: rk.Key.Created}
		ku.Last24h = admin.UsageWindow{Scope: "instance", ByEndpoint: []admin.UsageCount{}}
		if k := set.KeyActivity(rk.Key.ID); k != nil {
			w := k.Window(now)
			ku.Last24h.Since, ku.Last24h.Requests, ku.Last24h.Units = w.Since, w.Requests, w.Units
			ku.Last24h.UpstreamCalls = w.UpstreamCalls
			ku.Last24h.UpstreamAbandoned = w.UpstreamAbandoned
			for _, c := range w.Counts {
				ku.Last24h.ByEndpoint = append(ku.Last24h.ByEndpoint, admin.UsageCount{
					Endpoint: c.Endpoint.String(), Status: c.Class.String(), Requests: c.Requests, Units: c.Units,
				})
			}
			if !w.LastSeen.IsZero() {
				ku.LastSeen = &w.LastSeen
			}
		}
		out = append(out, ku)
	}
	if len(kps) == 0 {
		return out, nil
	}
	ids := make([]string, len(out))
	for i := range out {
		ids[i] = out[i].ID
	}
	shared := c.lastUsedOf(ctx, ids)
	for i := range out {
		ku := &out[i]
		last := shared[ku.ID]
		if ku.LastSeen != nil && ku.LastSeen.After(last) {
			last = *ku.LastSeen
		}
		if !last.IsZero() {
			ku.LastUsed = &last
		}
	}
	us, err := c.usage.Usage(ctx, kps)
	if err != nil {
		c.log.Warn("reading key usage failed", zap.Error(err))
		return nil, fmt.Errorf("console: key usage: %w", err)
	}
	for i, u := range us {
		ku := &out[i]
		ku.Source = u.Source
		if u.Policy.PerSecond > 0 {
			ku.Rate = &admin.RateUsage{PerSecond: u.Policy.PerSecond, Burst: u.Policy.Burst, Tokens: u.BurstTokens}
		}
		ku.Daily = quotaUsage(u.DayUsed, u.Policy.Daily, u.DayEnd)
		ku.Monthly = quotaUsage(u.MonthUsed, u.Policy.Monthly, u.MonthEnd)
	}
	return out, nil
}

func quotaUsage(used, limit int64, end time.Time) admin.QuotaUsage {
	q := admin.QuotaUsage{Used: used, Limit: limit, ResetsAt: end.UTC()}
	if limit > 0 {
		left := max(limit-used, 0)
		q.Remaining = &left
	}
	return q
}

// Summary implements admin.SummarySource.
func (c *Console) Summary(ctx context.Context) (admin.Summary, error) {
	now := c.clk.Now()
	set := c.settings()
	snap := c.act.Snapshot(now, topN)
	s := admin.Summary{
		GeneratedAt:       now.UTC(),
		Started:           snap.Started.UTC(),
		UptimeSeconds:     int64(now.Sub(snap.Started) / time.Second),
		Version:           buildinfo.Read().String(),
		Reload:            c.reloadStatus(),
		Cluster:           set.Config().ClusterMode(),
		RateWindowSeconds: int(activity.RateWindow / time.Second),
		HitRatioPct:       pct(snap.HitRatio),
		HitRatioTotalPct:  pct(snap.HitRatioTotal),
		Latency: admin.LatencySummary{
			WindowSeconds: int(activity.LatencyWindow / time.Second),
			Samples:       snap.LatencySamples,
			P50Ms:         millis(snap.P50),
			P99Ms:         millis(snap.P99),
		},
		Upstream: admin.UpstreamStatus{
			CallsLastMinute: snap.UpstreamLastMinute,
			CallsTotal:      snap.UpstreamTotal,
			Breaker:         c.up.State().String(),
		},
		TopTopics: admin.TopTopics{
			Since:         snap.TopicsSince,
			ByRequests:    topicCounts(snap.TopByRequests),
			ByUpstream:    topicCounts(snap.TopByUpstream),
			OtherRequests: snap.OtherTopicRequests,
		},
		Refusals: admin.RefusalSummary{WindowSeconds: int(activity.RefusalWindow / time.Second), ByCode: []admin.CodeCount{}},
	}
	for _, o := range activity.Outcomes {
		s.Outcomes = append(s.Outcomes, admin.OutcomeRate{Outcome: o.String(), PerSecond: round(snap.Rates[o], 1), Total: snap.Totals[o]})
	}
	s.Upstream.Shares = c.upstreamShares(ctx)
	if br, ok := c.up.(budgetReporter); ok {
		s.Upstream.PerMinuteLimit, s.Upstream.PerDayLimit = br.BudgetLimits()
		if m, d, ok := br.BudgetLeft(); ok {
			s.Upstream.MinuteLeft, s.Upstream.DayLeft = &m, &d
		}
	}
	for _, c := range snap.Refusals {
		s.Refusals.ByCode = append(s.Refusals.ByCode, admin.CodeCount{Code: c.Code, Count: c.Count})
	}
	if l := c.local; l != nil {
		s.Cache = admin.CacheStatus{Bytes: l.Bytes(), PinnedBytes: l.PinnedBytes(), MaxBytes: l.MaxBytes(), Entries: l.Len()}
		if s.Cache.MaxBytes > 0 {
			s.Cache.FillPct = round(100*float64(s.Cache.Bytes+s.Cache.PinnedBytes)/float64(s.Cache.MaxBytes), 1)
		}
	}
	var err error
	if s.TopKeys, s.TopAccounts, err = c.topLists(ctx, set, now); err != nil {
		return admin.Summary{}, err
	}
	return s, nil
}

// topLists returns the summary's top keys and accounts without reading
// every key: the candidates are the accounts c.top holds (the largest
// shares of a quota its admissions saw), and, for the entries that used
// nothing, the first accounts and keys by id with a quota and without one.
// Each candidate account's quotas are read once (one limiter lock each),
// and the lists are ordered from those figures.
func (c *Console) topLists(ctx context.Context, set *proxy.Settings, now time.Time) ([]admin.TopKey, []admin.TopAccount, error) {
	ctx, cancel := context.WithTimeout(ctx, usageTimeout)
	defer cancel()
	idx := c.keyIdx.of(set)
	picks := newAccountPicks(idx)
	for account := range c.top.candidates() {
		picks.addID(account)
	}
	picks.addQuiet(topN)
	for _, list := range [][]int{idx.quotaKeys, idx.freeKeys} {
		for _, k := range list[:min(topN, len(list))] {
			picks.addID(idx.keys[k].Account)
		}
	}
	places, kps := picks.places, picks.quotaPolicies()
	us, err := c.usage.Usage(ctx, kps)
	if err != nil {
		c.log.Warn("reading the top accounts' usage failed", zap.Error(err))
		return nil, nil, fmt.Errorf("console: top accounts: %w", err)
	}
	accounts := make([]admin.TopAccount, 0, len(places))
	var keys []admin.TopKey
	for j, i := range places {
		a := &idx.accounts[i]
		u := us[j]
		rank := rankOf(quotaUsage(u.DayUsed, u.Policy.Daily, u.DayEnd), quotaUsage(u.MonthUsed, u.Policy.Monthly, u.MonthEnd))
		ta := admin.TopAccount{ID: a.ID, Plan: a.Plan, Keys: make([]string, 0, len(a.keys)), QuotaRank: rank}
		for n, k := range a.keys {
			rk := idx.keys[k]
			ta.Keys = append(ta.Keys, rk.Key.ID)
			if n < topN { // the account's first keys by id are the only ones that can make the list
				keys = append(keys, admin.TopKey{ID: rk.Key.ID, Account: a.ID, Plan: rk.Plan, State: keyState(rk, now), QuotaRank: rank})
			}
		}
		accounts = append(accounts, ta)
	}
	slices.SortFunc(accounts, func(a, b admin.TopAccount) int { return compareRanks(a.QuotaRank, b.QuotaRank, a.ID, b.ID) })
	slices.SortFunc(keys, func(a, b admin.TopKey) int { return compareRanks(a.QuotaRank, b.QuotaRank, a.ID, b.ID) })
	if keys == nil {
		keys = []admin.TopKey{}
	}
	return keys[:min(topN, len(keys))], accounts[:min(topN, len(accounts))], nil
}

// rankOf is the highest share of the two quota windows used.
func rankOf(daily, monthly admin.QuotaUsage) admin.QuotaRank {
	r := admin.QuotaRank{Used: daily.Used}
	for _, w := range []struct {
		name  string
		q     admin.QuotaUsage
		share **admin.QuotaShare
	}{{"day", daily, &r.Daily}, {"month", monthly, &r.Monthly}} {
		if w.q.Limit <= 0 {
			continue
		}
		p := 100 * float64(w.q.Used) / float64(w.q.Limit)
		*w.share = &admin.QuotaShare{Used: w.q.Used, Limit: w.q.Limit, Pct: round(p, 1)}
		if r.Window == "" || p > r.Pct {
			r.Window, r.Used, r.Limit, r.Pct = w.name, w.q.Used, w.q.Limit, p
		}
	}
	r.Pct = round(r.Pct, 1)
	return r
}

// compareRanks orders by share used, then units used, then id; entries
// without a quota last.
func compareRanks(a, b admin.QuotaRank, aID, bID string) int {
	if (a.Window == "") != (b.Window == "") {
		if a.Window == "" {
			return 1
		}
		return -1
	}
	return cmp.Or(cmp.Compare(b.Pct, a.Pct), cmp.Compare(b.Used, a.Used), cmp.Compare(aID, bID))
}

func topicCounts(in []activity.TopicCount) []admin.TopicCount {
	out := make([]admin.TopicCount, 0, len(in))
	for _, t := range in {
		out = append(out, admin.TopicCount{Topic: t.Topic, Requests: t.Requests, UpstreamCalls: t.Upstream})
	}
	return out
}

// pct turns a ratio into a percentage with one decimal; a negative ratio
// (none) into nil.
func pct(ratio float64) *float64 {
	if ratio < 0 {
		return nil
	}
	p := round(100*ratio, 1)
	return &p
}

func millis(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 2) }

// round rounds x to the given number of decimals.
func round(x float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(x*p) / p
}

// quotaCollector exports trendgate_account_quota_used_units and
// trendgate_account_quota_limit_units per account and window (day, month),
// and trendgate_key_quota_used_units and trendgate_key_quota_limit_units
// per key and window, read from the limiter at scrape time; a quota that
// is off has no limit series. So that a scrape does not grow with the keys
// and accounts configured, the account gauges are those of the
// metrics.detail_accounts and of the metrics.max_accounts accounts with
// the highest share of a quota used (those an alert on quota is for),
// and only candidates for those are read (see gaugeCandidates); the key
// gauges are those of metrics.detail_keys only. The usage API has every
// key and account.
type quotaCollector struct {
	con                      *Console
	used, limt               *prometheus.Desc
	accountUsed, accountLimt *prometheus.Desc
}

func newQuotaCollector(con *Console) *quotaCollector {
	return &quotaCollector{
		con: con,
		used: prometheus.NewDesc("trendgate_key_quota_used_units",
			"Quota units a key of metrics.detail_keys has used in the current UTC window (day or month); from Redis in cluster mode. A window without a quota is not counted (0).",
			[]string{"key_id", "window"}, nil),
		limt: prometheus.NewDesc("trendgate_key_quota_limit_units",
			"A key's quota for the window (day or month), for metrics.detail_keys; absent when that quota is unlimited.",
			[]string{"key_id", "window"}, nil),
		accountUsed: prometheus.NewDesc("trendgate_account_quota_used_units",
			"Quota units an account (all its keys) has used in the current UTC window (day or month), for metrics.detail_accounts and the metrics.max_accounts accounts with the highest share of a quota used; from Redis in cluster mode. A window without a quota is not counted (0).",
			[]string{"account", "window"}, nil),
		accountLimt: prometheus.NewDesc("trendgate_account_quota_limit_units",
			"An account's quota for the window (day or month), shared by its keys, for the accounts of trendgate_account_quota_used_units; absent when that quota is unlimited.",
			[]string{"account", "window"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.used
	ch <- c.limt
	ch <- c.accountUsed
	ch <- c.accountLimt
}

// Collect implements prometheus.Collector. It reads the limiter once per
// candidate account (one of its keys stands for it: the quotas are the
// account's) and once per detail key, and nothing of the keys' recent
// traffic.
func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), usageTimeout)
	defer cancel()
	labels := c.con.labels
	idx := c.con.keyIdx.of(c.con.settings())
	var kps []limits.KeyPolicy
	for _, id := range labels.DetailKeys() {
		if rk, ok := idx.key(id); ok {
			kps = append(kps, limits.KeyPolicy{Key: rk.Key.ID, Account: rk.Account, Policy: rk.Policy})
		}
	}
	keys := len(kps) // kps[:keys] are the detail keys, the rest accounts
	kps = append(kps, c.con.gaugeCandidates(idx).quotaPolicies()...)
	if len(kps) == 0 {
		return
	}
	us, err := c.con.usage.Usage(ctx, kps)
	if err != nil {
		c.con.log.Warn("reading quota usage for metrics failed", zap.Error(err))
		ch <- prometheus.NewInvalidMetric(c.accountUsed, err)
		return
	}
	quotas := func(i int) (daily, monthly admin.QuotaUsage) {
		u := us[i]
		return quotaUsage(u.DayUsed, u.Policy.Daily, u.DayEnd), quotaUsage(u.MonthUsed, u.Policy.Monthly, u.MonthEnd)
	}
	accounts := make([]int, 0, len(kps)-keys)
	for i := range kps {
		if i < keys {
			d, m := quotas(i)
			collectQuotas(ch, c.used, c.limt, kps[i].Key, d, m)
		} else {
			accounts = append(accounts, i)
		}
	}
	for _, i := range gaugedAccounts(kps, accounts, quotas, labels) {
		d, m := quotas(i)
		collectQuotas(ch, c.accountUsed, c.accountLimt, kps[i].Account, d, m)
	}
}

// gaugeCandidates returns the accounts whose quota gauges a scrape may
// export, so that it reads those and not every account configured: all of
// them (those with keys) while they are no more than
// c.labels.MaxAccounts(), or without a limit. Past it: the detail
// accounts; the accounts c.top holds, which it is grown to hold enough of
// for the limit (an account with a share of a quota used is there once an
// admission of this instance saw it, see topQuota); and the first
// accounts by id with a quota and without one, as many as the limit and
// the detail accounts, which rank first among those that used nothing. Accounts without a quota rank
// after all the others and, among themselves, by id here: their use is
// not what the gauges are for.
func (c *Console) gaugeCandidates(idx *keyIndex) *accountPicks {
	picks := newAccountPicks(idx)
	n := c.labels.MaxAccounts()
	if n < 0 || len(idx.quotaAccounts)+len(idx.freeAccounts) <= n {
		for i := range idx.accounts {
			picks.add(i)
		}
		return picks
	}
	detail := c.labels.DetailAccounts()
	c.top.hold(n + len(detail))
	for _, id := range detail {
		picks.addID(id)
	}
	for account := range c.top.candidates() {
		picks.addID(account)
	}
	picks.addQuiet(n + len(detail)) // the detail accounts among them are not ranked
	return picks
}

// gaugedAccounts returns, of the accounts (indexes in kps), those whose
// quota gauges are exported: the detail accounts, and the
// labels.MaxAccounts() others with the highest share of a quota used (all
// of them for a nil labels).
func gaugedAccounts(kps []limits.KeyPolicy, accounts []int, quotas func(int) (admin.QuotaUsage, admin.QuotaUsage), labels *tenantlabel.Labels) []int {
	n := labels.MaxAccounts()
	if n < 0 || len(accounts) <= n {
		return accounts
	}
	type ranked struct {
		i    int
		rank admin.QuotaRank
	}
	out := make([]int, 0, n)
	rest := make([]ranked, 0, len(accounts))
	for _, i := range accounts {
		if labels.DetailAccount(kps[i].Account) {
			out = append(out, i)
			continue
		}
		rest = append(rest, ranked{i, rankOf(quotas(i))})
	}
	slices.SortFunc(rest, func(a, b ranked) int {
		return compareRanks(a.rank, b.rank, kps[a.i].Account, kps[b.i].Account)
	})
	for _, r := range rest[:min(n, len(rest))] {
		out = append(out, r.i)
	}
	return out
}

// collectQuotas sends the used and limit gauges of one key or account.
func collectQuotas(ch chan<- prometheus.Metric, used, limit *prometheus.Desc, id string, daily, monthly admin.QuotaUsage) {
	for _, w := range []struct {
		name string
		q    admin.QuotaUsage
	}{{"day", daily}, {"month", monthly}} {
		ch <- prometheus.MustNewConstMetric(used, prometheus.GaugeValue, float64(w.q.Used), id, w.name)
		if w.q.Limit > 0 {
			ch <- prometheus.MustNewConstMetric(limit, prometheus.GaugeValue, float64(w.q.Limit), id, w.name)
		}
	}
}

// lastUsedOf returns the cluster-wide last use of ids (nil without cluster
// mode, or when Redis cannot say: the caller then reports this instance's).
func (c *Console) lastUsedOf(ctx context.Context, ids []string) map[string]time.Time {
	if c.lastUsed == nil {
		return nil
	}
	m, err := c.lastUsed.Read(ctx, ids)
	if err != nil {
		c.log.Warn("reading keys' last use failed", zap.Error(err))
		return nil
	}
	return m
}
