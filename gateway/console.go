package gateway

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"trendgate/activity"
	"trendgate/admin"
	"trendgate/internal/buildinfo"
	"trendgate/limits"
	"trendgate/proxy"
	"trendgate/upstream"
)

// The operator's console: per-key usage (GET /keys), the dashboard summary
// (GET /summary) and the per-key quota gauges, all read at request or
// scrape time. The hit path only bumps counters (activity package).

var (
	_ admin.UsageSource   = (*Gateway)(nil)
	_ admin.SummarySource = (*Gateway)(nil)
)

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
func (g *Gateway) upstreamShares(ctx context.Context) []admin.UpstreamShare {
	out := []admin.UpstreamShare{}
	sr, ok := g.up.(shareReporter)
	if !ok {
		return out
	}
	ss, err := sr.Shares(ctx)
	if err != nil {
		g.log.Warn("reading the upstream shares failed", zap.Error(err))
		return out
	}
	for _, s := range ss {
		out = append(out, admin.UpstreamShare{Account: s.Tenant, Weight: s.Weight, Active: s.Active, Used: s.Used, Guaranteed: s.Guarantee})
	}
	return out
}

// topN is how many keys and topics the summary lists.
const topN = 10

// usageTimeout bounds one read of the limiter's counters (Redis in cluster
// mode, which falls back to local figures when it fails).
const usageTimeout = 2 * time.Second

// KeysUsage implements admin.UsageSource: every configured key, in
// configuration order.
func (g *Gateway) KeysUsage(ctx context.Context) ([]admin.KeyUsage, error) {
	out, err := g.keysUsage(ctx, g.chain.Settings(), "")
	return append(out, g.revokedKeys("")...), err // revoked ones last (keys.go)
}

// KeyUsage implements admin.UsageSource.
func (g *Gateway) KeyUsage(ctx context.Context, id string) (admin.KeyUsage, error) {
	ks, err := g.keysUsage(ctx, g.chain.Settings(), id)
	if err != nil {
		return admin.KeyUsage{}, err
	}
	if len(ks) == 0 {
		ks = g.revokedKeys(id) // keys.go
	}
	if len(ks) == 0 {
		return admin.KeyUsage{}, admin.ErrUnknownKey
	}
	return ks[0], nil
}

// keysUsage reads the usage of every key of set, or of the key named only
// ("" for all).
func (g *Gateway) keysUsage(ctx context.Context, set *proxy.Settings, only string) ([]admin.KeyUsage, error) {
	ctx, cancel := context.WithTimeout(ctx, usageTimeout)
	defer cancel()
	now := g.clk.Now()
	resolved := set.Config().ResolvedKeys()
	kps := make([]limits.KeyPolicy, 0, len(resolved))
	out := make([]admin.KeyUsage, 0, len(resolved))
	for _, rk := range resolved {
		if only != "" && rk.Key.ID != only {
			continue
		}
		kps = append(kps, limits.KeyPolicy{Key: rk.Key.ID, Account: rk.Account, Policy: rk.Policy})
		ku := admin.KeyUsage{ID: rk.Key.ID, Account: rk.Account, Plan: rk.Plan, State: "active", Expires: rk.Key.Expires,
			NotBefore: rk.Key.NotBefore, Created: rk.Key.Created}
		switch {
		case rk.Key.Disabled:
			ku.State = "disabled"
		case rk.Key.Expires != nil && !now.Before(*rk.Key.Expires):
			ku.State = "expired"
		case rk.Key.NotBefore != nil && now.Before(*rk.Key.NotBefore):
			ku.State = "not_yet_valid"
		}
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
	shared := g.lastUsedOf(ctx, ids)
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
	us, err := g.usage.Usage(ctx, kps)
	if err != nil {
		g.log.Warn("reading key usage failed", zap.Error(err))
		return nil, fmt.Errorf("gateway: key usage: %w", err)
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
func (g *Gateway) Summary(ctx context.Context) (admin.Summary, error) {
	now := g.clk.Now()
	set := g.chain.Settings()
	snap := g.act.Snapshot(now, topN)
	s := admin.Summary{
		GeneratedAt:       now.UTC(),
		Started:           snap.Started.UTC(),
		UptimeSeconds:     int64(now.Sub(snap.Started) / time.Second),
		Version:           buildinfo.Read().String(),
		Reload:            g.reloadStatus(),
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
			Breaker:         g.up.State().String(),
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
	s.Upstream.Shares = g.upstreamShares(ctx)
	if br, ok := g.up.(budgetReporter); ok {
		s.Upstream.PerMinuteLimit, s.Upstream.PerDayLimit = br.BudgetLimits()
		if m, d, ok := br.BudgetLeft(); ok {
			s.Upstream.MinuteLeft, s.Upstream.DayLeft = &m, &d
		}
	}
	for _, c := range snap.Refusals {
		s.Refusals.ByCode = append(s.Refusals.ByCode, admin.CodeCount{Code: c.Code, Count: c.Count})
	}
	if l := g.local; l != nil {
		s.Cache = admin.CacheStatus{Bytes: l.Bytes(), PinnedBytes: l.PinnedBytes(), MaxBytes: l.MaxBytes(), Entries: l.Len()}
		if s.Cache.MaxBytes > 0 {
			s.Cache.FillPct = round(100*float64(s.Cache.Bytes+s.Cache.PinnedBytes)/float64(s.Cache.MaxBytes), 1)
		}
	}
	keys, err := g.keysUsage(ctx, set, "")
	if err != nil {
		return admin.Summary{}, err
	}
	s.TopKeys = topKeys(keys, topN)
	s.TopAccounts = topAccounts(admin.Accounts(keys), topN)
	return s, nil
}

// topKeys orders keys by their highest share of a quota used (ties by
// id), keys without quotas last by units used today.
func topKeys(keys []admin.KeyUsage, n int) []admin.TopKey {
	out := make([]admin.TopKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, admin.TopKey{ID: k.ID, Account: k.Account, Plan: k.Plan, State: k.State, QuotaRank: rankOf(k.Daily, k.Monthly)})
	}
	slices.SortStableFunc(out, func(a, b admin.TopKey) int { return compareRanks(a.QuotaRank, b.QuotaRank, a.ID, b.ID) })
	return out[:min(n, len(out))]
}

// topAccounts orders accounts as topKeys orders keys.
func topAccounts(accounts []admin.AccountUsage, n int) []admin.TopAccount {
	out := make([]admin.TopAccount, 0, len(accounts))
	for _, a := range accounts {
		out = append(out, admin.TopAccount{ID: a.ID, Plan: a.Plan, Keys: a.Keys, QuotaRank: rankOf(a.Daily, a.Monthly)})
	}
	slices.SortStableFunc(out, func(a, b admin.TopAccount) int { return compareRanks(a.QuotaRank, b.QuotaRank, a.ID, b.ID) })
	return out[:min(n, len(out))]
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

// quotaCollector exports trendgate_key_quota_used_units and
// trendgate_key_quota_limit_units per key and window (day, month), and
// trendgate_account_quota_used_units and trendgate_account_quota_limit_units
// per account and window, read from the limiter at scrape time; a quota
// that is off has no limit series. The account label takes only configured
// accounts and the ids of keys configured without one: it is bounded by
// the configuration, like key_id.
type quotaCollector struct {
	g                        *Gateway
	used, limt               *prometheus.Desc
	accountUsed, accountLimt *prometheus.Desc
}

func newQuotaCollector(g *Gateway) *quotaCollector {
	return &quotaCollector{
		g: g,
		used: prometheus.NewDesc("trendgate_key_quota_used_units",
			"Quota units a key has used in the current UTC window (day or month); from Redis in cluster mode. A window without a quota is not counted (0).",
			[]string{"key_id", "window"}, nil),
		limt: prometheus.NewDesc("trendgate_key_quota_limit_units",
			"A key's quota for the window (day or month); absent when that quota is unlimited.",
			[]string{"key_id", "window"}, nil),
		accountUsed: prometheus.NewDesc("trendgate_account_quota_used_units",
			"Quota units an account (all its keys) has used in the current UTC window (day or month); from Redis in cluster mode. A window without a quota is not counted (0).",
			[]string{"account", "window"}, nil),
		accountLimt: prometheus.NewDesc("trendgate_account_quota_limit_units",
			"An account's quota for the window (day or month), shared by its keys; absent when that quota is unlimited.",
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

// Collect implements prometheus.Collector.
func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	keys, err := c.g.keysUsage(context.Background(), c.g.chain.Settings(), "")
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.used, err)
		return
	}
	for _, k := range keys {
		collectQuotas(ch, c.used, c.limt, k.ID, k.Daily, k.Monthly)
	}
	for _, a := range admin.Accounts(keys) {
		collectQuotas(ch, c.accountUsed, c.accountLimt, a.ID, a.Daily, a.Monthly)
	}
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
