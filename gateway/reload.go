package gateway

import (
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"trendgate/admin"
	"trendgate/config"
	"trendgate/internal/clock"
	"trendgate/keyservice"
)

// reloads is the record of the process's reloads: each one counted and
// logged once, and the latest outcome kept for the dashboard.
type reloads struct {
	log     *zap.Logger
	clk     clock.Clock
	metrics *metrics
	boot    *config.Config // the configuration the process started with
	// last is the latest reload's outcome; nil before any.
	last atomic.Pointer[admin.ReloadStatus]
}

// refuse records a reload refused with err, counted and logged once, and
// returns err.
func (r *reloads) refuse(err error) error {
	r.metrics.reloads.WithLabelValues("refused").Inc()
	r.log.Error("config reload refused; the previous configuration keeps serving", zap.Error(err))
	at := r.clk.Now().UTC()
	var pending []string // what the last reload that loaded left pending still is
	if prev := r.last.Load(); prev != nil {
		pending = prev.RestartPending
	}
	r.last.Store(&admin.ReloadStatus{At: &at, Result: "refused", Error: err.Error(), RestartPending: pending})
	return err
}

// liveSettings are the settings a reload applies, by YAML path (a path
// also covers the settings under it); every other setting, including any
// added later until it is listed here, takes effect only after a restart.
var liveSettings = []string{
	"plans", "accounts", "keys", "routes", "limits.costs", "server.trusted_proxies", "server.cors", "admin.token", "admin.tokens",
	"cache.stale_while_revalidate", "cache.max_stale", "cache.stale_if_error_wait",
	"cache.fetch_timeout", "cache.ttl", "tracing.ratio",
	"metrics", "tracing.trust_incoming",
}

// needsRestart reports whether a change of the setting at path takes
// effect only after a restart.
func needsRestart(path string) bool {
	for _, live := range liveSettings {
		if path == live || strings.HasPrefix(path, live+".") {
			return false
		}
	}
	return true
}

// report logs one line saying what a reload from old to cfg changed
// (keys added, removed, disabled, enabled or edited; plans added, removed
// or edited; other live settings), one warning per setting that changed
// but needs a restart, and sets trendgate_config_restart_pending from the
// difference with the configuration the process started with. Values are
// never logged: an operator rotating upstream.api_key by reload reads that
// it is not live yet, not the key. It returns the settings pending a
// restart.
func (r *reloads) report(old, cfg *config.Config) (pending []string) {
	for _, p := range changedSettings(r.boot, cfg) {
		if needsRestart(p) {
			pending = append(pending, p)
		}
	}
	var live []string
	for _, p := range changedSettings(old, cfg) {
		switch {
		case p == "keys" || p == "plans":
		case !needsRestart(p):
			live = append(live, p)
		case slices.Contains(pending, p):
			r.log.Warn(p+" changed; takes effect after a restart", zap.String("setting", p))
		}
	}
	if len(pending) > 0 {
		r.metrics.restart.Set(1)
	} else {
		r.metrics.restart.Set(0)
	}
	k := keyservice.DiffKeys(old.Keys, cfg.Keys)
	pa, pr, pc := diffPlans(old.Plans, cfg.Plans)
	r.log.Info("config reloaded",
		zap.Int("keys", len(cfg.Keys)), zap.Int("plans", len(cfg.Plans)),
		zap.Strings("keys_added", k.Added), zap.Strings("keys_removed", k.Removed),
		zap.Strings("keys_disabled", k.Disabled), zap.Strings("keys_enabled", k.Enabled),
		zap.Strings("keys_changed", k.Changed),
		zap.Strings("plans_added", pa), zap.Strings("plans_removed", pr), zap.Strings("plans_changed", pc),
		zap.Strings("settings_changed", live), zap.Strings("restart_pending", pending))
	return pending
}

// status is the dashboard's view of the latest reload.
func (r *reloads) status() admin.ReloadStatus {
	if st := r.last.Load(); st != nil {
		out := *st
		if out.RestartPending == nil {
			out.RestartPending = []string{}
		}
		return out
	}
	return admin.ReloadStatus{RestartPending: []string{}}
}

// changedSettings is config.Changed(a, b) with the keys compared by
// Key.Equal instead of reflection: a reload of 100,000 keys compares them
// twice (with the configuration in force and with the one at start).
func changedSettings(a, b *config.Config) []string {
	ak, bk := *a, *b
	ak.Keys, bk.Keys = nil, nil
	out := config.Changed(&ak, &bk)
	if !slices.EqualFunc(a.Keys, b.Keys, config.Key.Equal) {
		out = append(out, "keys")
	}
	return out
}

// diffPlans returns the plans added, removed and changed, each sorted.
func diffPlans(old, cur map[string]config.Plan) (added, removed, changed []string) {
	for name, p := range cur {
		o, ok := old[name]
		switch {
		case !ok:
			added = append(added, name)
		case !reflect.DeepEqual(o, p):
			changed = append(changed, name)
		}
	}
	for name := range old {
		if _, ok := cur[name]; !ok {
			removed = append(removed, name)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	slices.Sort(changed)
	return added, removed, changed
}
