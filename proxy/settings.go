package proxy

import (
	"fmt"
	"net/netip"
	"time"

	"trendgate/activity"
	"trendgate/api"
	"trendgate/auth"
	"trendgate/cache"
	"trendgate/config"
	"trendgate/internal/cors"
	"trendgate/limits"
	"trendgate/projection"
)

// Settings is one immutable snapshot of everything a reload swaps: keys,
// plans, costs and TTLs. A request loads it once, in observe, and every
// stage reads that copy (info.set), so a reload can never pair a key with
// another snapshot's plan or costs. Build it with Compile.
type Settings struct {
	cfg      *config.Config
	keyring  *auth.Keyring
	plans    map[string]*plan // plan name → compiled plan
	policies policyMap        // key id → resolved rate and quotas (keyset.go)
	costs    limits.Costs
	routes   *api.Routes // the configured routes; nil: none
	ttl      cache.Config
	trusted  []netip.Prefix
	cors     *cors.Policy             // nil: CORS off
	usage    map[string]*activity.Key // key id → its 24 h counters (record.go)
	// gen numbers the snapshot once the chain serves it (Chain.Swap), for
	// the connection memos (connmemo.go); a copy gets its own when served.
	gen uint64
}

// plan is a compiled plan: allowed endpoints and projection.
type plan struct {
	name      string
	endpoints [api.EndpointTSV + 1]bool
	routes    map[string]bool        // names of the configured routes the plan includes
	proj      *projection.Projection // nil: full data
	memoKey   any                    // the entry memo key of this plan's variant (see variantOf)
	upWeight  float64                // upstream fair-share weight; 0 means 1
	upPerMin  int                    // upstream calls per key per minute; 0 no cap
}

// Compile turns a validated config into a Settings snapshot.
func Compile(cfg *config.Config) (*Settings, error) {
	set := &Settings{
		cfg:      cfg,
		policies: policyMap{base: make(map[string]limits.Policy, len(cfg.Keys))},
		plans:    make(map[string]*plan, len(cfg.Plans)),
		costs:    cfg.Limits.Costs,
		ttl:      cfg.Cache,
	}
	routes, err := api.NewRoutes(cfg.Routes)
	if err != nil {
		return nil, err
	}
	set.routes = routes
	for name, p := range cfg.Plans {
		proj, err := projection.Compile(p.Projection())
		if err != nil {
			return nil, fmt.Errorf("plans.%s: %w", name, err)
		}
		cp := &plan{name: name, proj: proj, upWeight: p.UpstreamWeight, upPerMin: p.UpstreamPerMinute, memoKey: variantKey(name, proj)}
		cp.routes = make(map[string]bool)
		for _, e := range p.Endpoints {
			if ep, ok := api.EndpointNamed(e); ok {
				cp.endpoints[ep] = true
			} else {
				cp.routes[e] = true
			}
		}
		set.plans[name] = cp
	}
	specs := make([]auth.KeySpec, 0, len(cfg.Keys))
	for _, rk := range cfg.ResolvedKeys() {
		specs = append(specs, specOf(rk))
		set.policies.base[rk.Key.ID] = rk.Policy
	}
	kr, err := auth.NewKeyring(specs)
	if err != nil {
		return nil, err
	}
	set.keyring = kr
	for _, c := range cfg.Server.TrustedProxies {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("server.trusted_proxies: %w", err)
		}
		set.trusted = append(set.trusted, p.Masked())
	}
	set.cors = cors.New(cfg.Server.CORS)
	return set, nil
}

// Config returns the configuration the snapshot was compiled from.
func (set *Settings) Config() *config.Config { return set.cfg }

// Routes returns the configured routes; nil for none.
func (set *Settings) Routes() *api.Routes { return set.routes }

// KeyActivity returns the 24 h counters of the key with id, nil for a key
// the snapshot does not have.
func (set *Settings) KeyActivity(id string) *activity.Key { return set.usage[id] }

// KeyActivities returns the 24 h counters of every key of the snapshot,
// by key id (the state file stores and restores them). Read only.
func (set *Settings) KeyActivities() map[string]*activity.Key { return set.usage }

// FreshUntil is when an answer to q fetched at fetched stops being fresh
// under the snapshot's cache lifetimes; negative marks an unknown-topic
// answer.
func (set *Settings) FreshUntil(q api.Request, negative bool, fetched time.Time) time.Time {
	return set.ttl.FreshUntil(freshnessClass(q, negative), fetched)
}
