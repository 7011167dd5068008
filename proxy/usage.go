package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"trendgate/api"
	"trendgate/limits"
	"trendgate/rollup"
)

// GET /trendgate/v1/usage: a client reads its own standing with its own
// key (api.Usage). The read takes one token from the key's bucket, so it
// cannot be used to flood the gateway, but charges no quota, never reaches
// the cache or the upstream, and is not counted in the key's 24 h traffic.

// usageReadTimeout bounds one read of the limiter's counters (Redis in
// cluster mode, which falls back to local figures when it fails).
const usageReadTimeout = 2 * time.Second

// selfUsage answers requests for api.UsagePath through their own short
// chain (check, authenticate, token bucket, report) and passes every other
// request on.
func (c *Chain) selfUsage(next http.Handler) http.Handler {
	chain := compose(http.HandlerFunc(c.serveUsage),
		c.checkUsage,   // GET or HEAD, no body, no query; 400/405
		c.authenticate, // Bearer key → Principal; 401
		c.limitRate,    // one token of the key's bucket, no quota; 429
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != api.UsagePath {
			next.ServeHTTP(w, r)
			return
		}
		infoFrom(r.Context()).usageRead = true
		chain.ServeHTTP(w, r)
	})
}

// checkUsage refuses a usage request the API would refuse on any route.
func (c *Chain) checkUsage(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := api.CheckUsageRequest(r); err != nil {
			if errors.Is(err, api.ErrMethodNotAllowed) {
				w.Header().Set("Allow", api.AllowedMethods)
			}
			if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
				w.Header().Set("Connection", "close") // an unread body: see route
			}
			c.fail(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitRate admits the request against the key's token bucket only, at
// cost 1: the policy it is admitted under has its quotas turned off. The
// RateLimit headers it sets therefore describe the bucket.
func (c *Chain) limitRate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := infoFrom(r.Context())
		p := in.policy
		p.Daily, p.Monthly = 0, 0
		d, err := c.limiter.Admit(r.Context(), limits.Subject{Key: in.keyID, Account: in.account}, p, 1)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		d.SetHeaders(w.Header())
		if !d.Allowed {
			c.metrics.limited.WithLabelValues(string(d.Reason)).Inc()
			c.fail(w, r, limitError(d))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveUsage writes the authenticated key's api.Usage.
func (c *Chain) serveUsage(w http.ResponseWriter, r *http.Request) {
	in := infoFrom(r.Context())
	body, err := c.usageOf(r.Context(), in)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	b, err := json.Marshal(body)
	if err != nil {
		c.fail(w, r, fmt.Errorf("proxy: encode usage: %w", err))
		return
	}
	h := w.Header()
	h["Content-Type"] = ctJSON
	h["X-Content-Type-Options"] = nosniff
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

// usageOf reads in's key's standing: the account's quota counters from the
// limiter (Redis in cluster mode), the traffic from this instance's
// counters.
func (c *Chain) usageOf(ctx context.Context, in *info) (api.Usage, error) {
	ctx, cancel := context.WithTimeout(ctx, usageReadTimeout)
	defer cancel()
	us, err := c.usage.Usage(ctx, []limits.KeyPolicy{{Key: in.keyID, Account: in.account, Policy: in.policy}})
	if err != nil {
		return api.Usage{}, fmt.Errorf("proxy: usage of key %s: %w", in.keyID, err)
	}
	u := us[0]
	now := c.clk.Now()
	out := api.Usage{
		GeneratedAt: now.UTC(),
		Key:         in.keyID,
		Account:     in.account,
		Plan:        in.plan.name,
		Daily:       usageQuota(u.DayUsed, u.Policy.Daily, u.DayEnd),
		Monthly:     usageQuota(u.MonthUsed, u.Policy.Monthly, u.MonthEnd),
		Last24h:     traffic(in.set, in.keyID, in.account, now),
	}
	if c.rollups != nil {
		to := rollup.DateOf(now)
		ss, err := c.rollups.Query(ctx, rollup.Query{From: to.AddDays(1 - api.UsageHistoryDays), To: to, Account: in.account})
		if err != nil {
			return api.Usage{}, fmt.Errorf("proxy: usage history of account %s: %w", in.account, err)
		}
		out.History = []api.UsageDay{}
		for _, s := range ss {
			for _, d := range s.Days {
				out.History = append(out.History, api.UsageDay{Date: d.Date.String(), Units: d.Units, Requests: d.Requests, UpstreamCalls: d.UpstreamCalls, BytesSent: d.BytesSent})
			}
		}
	}
	if u.Policy.PerSecond > 0 {
		out.Rate = &api.UsageRate{PerSecond: u.Policy.PerSecond, Burst: u.Policy.Burst, Remaining: u.BurstTokens}
	}
	return out, nil
}

func usageQuota(used, limit int64, end time.Time) api.UsageQuota {
	q := api.UsageQuota{Limit: limit, Used: used, ResetsAt: end.UTC()}
	if limit > 0 {
		left := max(limit-used, 0)
		q.Remaining = &left
	}
	return q
}

// traffic sums this instance's 24 h counters of the account's keys, and
// gives keyID's own.
func traffic(set *Settings, keyID, account string, now time.Time) api.UsageTraffic {
	t := api.UsageTraffic{Scope: "instance"}
	for _, rk := range set.cfg.ResolvedKeys() {
		k := set.usage[rk.Key.ID]
		if rk.Account != account || k == nil {
			continue
		}
		w := k.Window(now)
		t.Since = w.Since
		c := api.UsageCounts{Requests: w.Requests, Units: w.Units, UpstreamCalls: w.UpstreamCalls}
		t.Account.Requests += c.Requests
		t.Account.Units += c.Units
		t.Account.UpstreamCalls += c.UpstreamCalls
		if rk.Key.ID == keyID {
			t.Key = c
		}
	}
	return t
}
