// Package keyservice is the key API's service: it creates, revokes and
// rotates keys, makes, changes and deletes accounts, and resets an
// account's quota, keeping each change in the key store (package
// keystore) and putting it in force in the running request chain. A
// change compiles only the keys and accounts it touches (patched), once,
// under the store's lock. It also lists the tombstones of revoked keys
// for the console.
package keyservice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/admin"
	"trendgate/api"
	"trendgate/config"
	"trendgate/internal/clock"
	"trendgate/keystore"
	"trendgate/limits"
	"trendgate/proxy"
)

var _ admin.KeyAdmin = (*Service)(nil)

// Chain is what the service changes: the settings in force of the
// running request chain (proxy.Chain).
type Chain interface {
	Settings() *proxy.Settings
	Swap(set *proxy.Settings) (old *proxy.Settings)
}

// Options are the service's dependencies.
type Options struct {
	// Redis holds the shared copy of the changes in cluster mode; nil
	// without it.
	Redis redis.UniversalClient
	Clock clock.Clock
	Log   *zap.Logger
	// Applied counts the changes put in force, by result ("ok",
	// "refused").
	Applied *prometheus.CounterVec
	// Quotas clears an account's quota counter (ResetAccount).
	Quotas limits.QuotaResetter
}

// Service is the key API's service of one gateway. Build it with Open,
// then Start it with the chain it changes.
type Service struct {
	clk     clock.Clock
	log     *zap.Logger
	applied *prometheus.CounterVec
	quotas  limits.QuotaResetter
	// chain is nil until Start: the gateway builds its settings from the
	// Doc Open returns.
	chain Chain

	// keys keeps the key API's changes; base is the configuration
	// file's settings in force, which they are laid over. swapMu
	// serializes the swaps of the settings in force: a reload's and the
	// key API's (taken inside the store's lock, never around it).
	keys   *keystore.Store
	base   atomic.Pointer[config.Config]
	swapMu sync.Mutex
}

// keysTimeout bounds each Redis command of the key API's store: an edit
// is an operator's request, not a client's, and may wait longer than the
// counters' redis.timeout.
const keysTimeout = time.Second

// Open opens the key API's store (keys_file, and in cluster mode the
// shared copy in o.Redis) and returns the service and cfg with its
// changes laid over. The changes must fit cfg: a revoked key must not
// come back because the file and the changes disagree, so a misfit
// refuses the start. Close releases the store, also after an error.
func Open(cfg *config.Config, o Options) (*Service, *config.Config, error) {
	s := &Service{clk: o.Clock, log: o.Log, applied: o.Applied, quotas: o.Quotas}
	s.base.Store(cfg)
	st, err := keystore.Open(context.Background(), keystore.Options{
		Path: cfg.KeysFile, Redis: o.Redis, Prefix: cfg.Redis.Prefix,
		Timeout:   max(cfg.Redis.Timeout, keysTimeout),
		Retention: cfg.RevokedKeyRetention,
		Clock:     s.clk, Log: s.log,
		Base:     s.base.Load,
		Check:    s.checkKeys,
		OnChange: s.keysChanged,
	})
	if err != nil {
		return nil, nil, err
	}
	s.keys = st
	eff := st.Doc().Apply(cfg)
	if err := eff.Validate(); err != nil {
		return s, nil, fmt.Errorf("the key API's changes (keys_file or Redis, version %d) do not fit this configuration: %w", st.Doc().Version, err)
	}
	return s, eff, nil
}

// Start puts chain, built from the settings Open returned, under the
// key API's changes, and starts following the other instances' changes.
func (s *Service) Start(chain Chain) {
	s.chain = chain
	s.keys.Start()
}

// Close stops the store (see keystore.Store.Close).
func (s *Service) Close() error { return s.keys.Close() }

// Reload lays the key API's changes over cfg, the configuration file's
// new settings, checks the result when they change it, and has apply put
// it in force, under the store's lock and the swap lock; cfg is then the
// base of the changes to come. It returns what apply was given.
func (s *Service) Reload(cfg *config.Config, apply func(eff *config.Config) error) (eff *config.Config, err error) {
	err = s.keys.Reload(func(d *keystore.Doc) error {
		s.swapMu.Lock()
		defer s.swapMu.Unlock()
		eff = d.Apply(cfg)
		if eff != cfg {
			if err := eff.Validate(); err != nil {
				return fmt.Errorf("with the key API's changes (version %d): %w", d.Version, err)
			}
		}
		if err := apply(eff); err != nil {
			return err
		}
		s.base.Store(cfg)
		return nil
	})
	return eff, err
}

// checkKeys prepares the settings in force once the edit p, which makes
// next, is stored: the keys and accounts p touches compiled again over
// the settings in force, checked as configured ones are. The store calls
// it under its lock, and commit too, so nothing comes between.
func (s *Service) checkKeys(next *keystore.Doc, p *keystore.Patch) (commit func(), err error) {
	if s.chain == nil {
		// Still in New, which builds the settings from the Doc itself.
		_, err := compileValid(next.Apply(s.base.Load()))
		return func() {}, err
	}
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	set, err := s.patched(s.chain.Settings(), next, []*keystore.Patch{p})
	if err != nil {
		return nil, err
	}
	return func() {
		s.swapMu.Lock()
		defer s.swapMu.Unlock()
		s.putKeys(set, next.Version, []*keystore.Patch{p})
	}, nil
}

// keysChanged puts a newer Doc in force that another instance stored
// (seen by the store's poll): the keys its patches touch when they are
// known, else the whole Doc laid over the file again. One that does not
// fit this instance's configuration file is logged and the keys in force
// stay.
func (s *Service) keysChanged(d *keystore.Doc, ps []*keystore.Patch) {
	if s.chain == nil {
		return // still in New: openKeys reads the Doc itself
	}
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	var set *proxy.Settings
	var err error
	if ps != nil {
		set, err = s.patched(s.chain.Settings(), d, ps)
	} else {
		set, err = compileValid(d.Apply(s.base.Load()))
	}
	if err != nil {
		s.applied.WithLabelValues("refused").Inc()
		s.log.Error("keys: the key API's changes do not fit this instance's configuration; the keys in force stay",
			zap.Int64("version", d.Version), zap.Error(err))
		return
	}
	if ps != nil {
		s.putKeys(set, d.Version, ps)
		return
	}
	old := s.chain.Swap(set)
	s.applied.WithLabelValues("ok").Inc()
	k := DiffKeys(old.Config().Keys, set.Config().Keys)
	s.log.Info("keys changed", zap.Int64("version", d.Version), zap.Int("keys", len(set.Config().Keys)),
		zap.Strings("keys_added", k.Added), zap.Strings("keys_removed", k.Removed), zap.Strings("keys_changed", k.Changed))
}

// putKeys makes set, prepared by patched, the settings in force; the
// caller holds swapMu.
func (s *Service) putKeys(set *proxy.Settings, version int64, ps []*keystore.Patch) {
	s.chain.Swap(set)
	s.applied.WithLabelValues("ok").Inc()
	keys, accounts := touched(ps)
	s.log.Info("keys changed", zap.Int64("version", version), zap.Int("keys", len(set.Config().Keys)),
		zap.Strings("keys_touched", keys), zap.Strings("accounts_touched", accounts))
}

// touched is what ps touch, each id once.
func touched(ps []*keystore.Patch) (keys, accounts []string) {
	for _, p := range ps {
		k, a := p.Touched()
		keys, accounts = append(keys, k...), append(accounts, a...)
	}
	slices.Sort(keys)
	slices.Sort(accounts)
	return slices.Compact(keys), slices.Compact(accounts)
}

// patched is cur with the keys and accounts that ps touch as d (laid over
// the configuration file) has them: those keys and accounts are found,
// checked and compiled, and everything else is shared with cur, so a key
// change costs the same beside 100 keys as beside 100,000.
func (s *Service) patched(cur *proxy.Settings, d *keystore.Doc, ps []*keystore.Patch) (*proxy.Settings, error) {
	base := s.base.Load()
	keys, accounts := touched(ps)
	eff := *cur.Config()
	copied := false
	for _, id := range keys {
		k, ok := d.Key(base, id)
		i := slices.IndexFunc(eff.Keys, func(k config.Key) bool { return k.ID == id })
		switch {
		case ok && i < 0:
			// Appended in place when there is room: a Config in force
			// only reads its own length.
			eff.Keys = append(eff.Keys, k)
		case i >= 0:
			if !copied {
				eff.Keys, copied = slices.Clone(eff.Keys), true
			}
			if ok {
				eff.Keys[i] = k
			} else {
				eff.Keys = slices.Delete(eff.Keys, i, i+1)
			}
		}
	}
	if len(accounts) > 0 {
		eff.Accounts = slices.Clone(eff.Accounts)
	}
	for _, id := range accounts {
		a, ok := d.Account(base, id)
		i := slices.IndexFunc(eff.Accounts, func(a config.Account) bool { return a.ID == id })
		switch {
		case ok && i < 0:
			eff.Accounts = append(eff.Accounts, a)
		case ok:
			eff.Accounts[i] = a
		case i >= 0:
			eff.Accounts = slices.Delete(eff.Accounts, i, i+1)
		}
	}
	// An account's numbers are in the policy of each of its keys.
	ids := keys
	if len(accounts) > 0 {
		in := make(map[string]bool, len(accounts))
		for _, id := range accounts {
			in[id] = true
		}
		for _, k := range eff.Keys {
			if in[k.Account] || k.Account == "" && in[k.ID] {
				ids = append(ids, k.ID)
			}
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
	}
	if err := eff.ValidateChanged(ids, accounts); err != nil {
		return nil, err
	}
	return cur.WithKeys(&eff, ids)
}

// audit writes the key API's log line for one change: what, on which key
// or account, by which admin (never a secret).
func (s *Service) audit(action, by string, fields ...zap.Field) {
	s.log.Info("key api", append([]zap.Field{zap.String("action", action), zap.String("admin", by)}, fields...)...)
}

// CreateKey makes a key (see keystore.Store.Create).
func (s *Service) CreateKey(ctx context.Context, by string, nk keystore.NewKey) (admin.CreatedKey, error) {
	k, secret, err := s.keys.Create(ctx, nk)
	if err != nil {
		return admin.CreatedKey{}, err
	}
	out := s.created(k, secret)
	s.audit("create", by, zap.String("key", k.ID), zap.String("account", out.Account), zap.String("plan", out.Plan))
	return out, nil
}

// RevokeKey takes a key out of force on every instance.
func (s *Service) RevokeKey(ctx context.Context, by, id string) (admin.RevokedKey, error) {
	at, err := s.keys.Revoke(ctx, id, by)
	if errors.Is(err, keystore.ErrPending) {
		// Denied here at once; every instance once Redis is back.
		s.audit("revoke", by, zap.String("key", id), zap.Bool("pending", true))
		return admin.RevokedKey{ID: id, Revoked: at, Pending: true}, nil
	}
	if err != nil {
		return admin.RevokedKey{}, err
	}
	s.audit("revoke", by, zap.String("key", id))
	return admin.RevokedKey{ID: id, Revoked: at}, nil
}

// RotateKey makes a new key in key id's account and ends key id after the
// overlap.
func (s *Service) RotateKey(ctx context.Context, by, id string, r admin.RotateRequest) (admin.CreatedKey, error) {
	overlap := admin.DefaultOverlap
	if r.Overlap != "" {
		d, err := time.ParseDuration(r.Overlap)
		if err != nil || d < 0 || d > admin.MaxOverlap {
			return admin.CreatedKey{}, &keystore.Error{Kind: keystore.Invalid,
				Msg: fmt.Sprintf("overlap: %q is not a duration from 0s to %s (such as \"24h\" or \"90m\")", r.Overlap, admin.MaxOverlap)}
		}
		overlap = d
	}
	rot, secret, err := s.keys.Rotate(ctx, id, r.NewID, overlap)
	if err != nil {
		return admin.CreatedKey{}, err
	}
	out := s.created(rot.New, secret)
	out.Replaces = &admin.EndedKey{ID: id, Expires: rot.OldEnd}
	s.audit("rotate", by, zap.String("key", rot.New.ID), zap.String("account", out.Account),
		zap.String("replaces", id), zap.Time("replaced_expires", rot.OldEnd))
	return out, nil
}

// PatchAccount changes an account's overrides and returns its numbers in
// force.
func (s *Service) PatchAccount(ctx context.Context, by, id string, p keystore.AccountPatch) (admin.AccountSettings, error) {
	if err := s.keys.PatchAccount(ctx, id, p); err != nil {
		return admin.AccountSettings{}, err
	}
	var set []string
	for name, f := range map[string]bool{"per_second": p.PerSecond.Set, "burst": p.Burst.Set, "daily": p.Daily.Set, "monthly": p.Monthly.Set} {
		if f {
			set = append(set, name)
		}
	}
	slices.Sort(set)
	s.audit("patch_account", by, zap.String("account", id), zap.Strings("fields", set))
	for _, a := range s.chain.Settings().Config().ResolvedAccounts() {
		if a.ID == id {
			return admin.AccountSettings{ID: a.ID, Plan: a.Plan, Keys: append([]string{}, a.Keys...),
				Daily: a.Policy.Daily, Monthly: a.Policy.Monthly, PerSecond: a.Policy.PerSecond, Burst: a.Policy.Burst}, nil
		}
	}
	return admin.AccountSettings{}, fmt.Errorf("keyservice: account %q patched but not in force", id)
}

// CreateAccount makes an account through the key API and returns its
// numbers in force.
func (s *Service) CreateAccount(ctx context.Context, by string, na keystore.NewAccount) (admin.AccountSettings, error) {
	if err := s.keys.CreateAccount(ctx, na); err != nil {
		return admin.AccountSettings{}, err
	}
	s.audit("create_account", by, zap.String("account", na.ID), zap.String("plan", na.Plan))
	return s.accountSettings(na.ID)
}

// DeleteAccount takes away an account the key API made, once no key in
// force names it.
func (s *Service) DeleteAccount(ctx context.Context, by, id string) (admin.DeletedAccount, error) {
	at, err := s.keys.DeleteAccount(ctx, id)
	if err != nil {
		return admin.DeletedAccount{}, err
	}
	s.audit("delete_account", by, zap.String("account", id))
	return admin.DeletedAccount{ID: id, Deleted: at}, nil
}

// accountSettings is account id's numbers in force.
func (s *Service) accountSettings(id string) (admin.AccountSettings, error) {
	cfg := s.chain.Settings().Config()
	i := slices.IndexFunc(cfg.Accounts, func(a config.Account) bool { return a.ID == id })
	if i < 0 {
		return admin.AccountSettings{}, fmt.Errorf("keyservice: account %q made but not in force", id)
	}
	a := cfg.Accounts[i]
	pol := a.Apply(cfg.Plans[a.Plan].Policy)
	out := admin.AccountSettings{ID: a.ID, Plan: a.Plan, Keys: []string{},
		Daily: pol.Daily, Monthly: pol.Monthly, PerSecond: pol.PerSecond, Burst: pol.Burst}
	for _, k := range cfg.Keys {
		if k.Account == id {
			out.Keys = append(out.Keys, k.ID)
		}
	}
	return out, nil
}

// created is the answer for a new key k: its account and plan as now in
// force.
func (s *Service) created(k keystore.Key, secret string) admin.CreatedKey {
	out := admin.CreatedKey{ID: k.ID, Secret: secret, Account: api.AccountOf(k.ID, k.Account), Plan: k.Plan,
		Created: k.Created, NotBefore: k.NotBefore, Expires: k.Expires}
	cfg := s.chain.Settings().Config()
	if i := slices.IndexFunc(cfg.Accounts, func(a config.Account) bool { return a.ID == out.Account }); i >= 0 {
		out.Plan = cfg.Accounts[i].Plan
	}
	return out
}

// ResetAccount clears account id's quota counter of the current day or
// month (see limits.QuotaResetter).
func (s *Service) ResetAccount(ctx context.Context, by, id string, r admin.ResetRequest) (admin.AccountReset, error) {
	if !hasAccount(s.chain.Settings().Config(), id) {
		return admin.AccountReset{}, &keystore.Error{Kind: keystore.UnknownAccount, Msg: fmt.Sprintf("no account has id %q", id)}
	}
	cleared, err := s.quotas.ResetQuota(ctx, id, limits.QuotaWindow(r.Window))
	if errors.Is(err, limits.ErrUnavailable) {
		return admin.AccountReset{}, fmt.Errorf("%w: %v", keystore.ErrUnavailable, err)
	}
	if err != nil {
		// Reset in memory, not stored (the state file could not be
		// written): the change happened, so it is audited, and answered
		// as a failure, since a crash would undo it.
		s.audit("reset_account", by, zap.String("account", id), zap.String("window", r.Window), zap.Int64("cleared", cleared), zap.Error(err))
		return admin.AccountReset{}, err
	}
	s.audit("reset_account", by, zap.String("account", id), zap.String("window", r.Window), zap.Int64("cleared", cleared))
	return admin.AccountReset{Account: id, Window: r.Window, Cleared: cleared}, nil
}

// hasAccount reports whether cfg has account id: configured, or a key
// configured without an account (an account of its own).
func hasAccount(cfg *config.Config, id string) bool {
	return slices.ContainsFunc(cfg.Accounts, func(a config.Account) bool { return a.ID == id }) ||
		slices.ContainsFunc(cfg.Keys, func(k config.Key) bool { return k.ID == id && k.Account == "" })
}

// SyncKeys brings the keys in force up to the cluster's now (it also runs
// every keystore.PollEvery); without cluster mode it does nothing.
func (s *Service) SyncKeys(ctx context.Context) error { return s.keys.Poll(ctx) }

// compileValid validates cfg and compiles it.
func compileValid(cfg *config.Config) (*proxy.Settings, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return proxy.Compile(cfg)
}

// RevokedKeys is the standing of each key revoked through the key API
// whose tombstone is kept and whose id no key in force has now (only
// that id, unless ""), as the admin views show it: state revoked, when,
// by which admin token. A revoked key has no rate, quota or traffic of
// its own any more. inForce tells whether a key of an id is in force.
func (s *Service) RevokedKeys(only string, inForce func(id string) bool) []admin.KeyUsage {
	d, base := s.keys.Doc(), s.base.Load()
	var out []admin.KeyUsage
	add := func(ku admin.KeyUsage) {
		if (only == "" || ku.ID == only) && !inForce(ku.ID) {
			ku.State = admin.StateRevoked
			ku.Source = "local"
			ku.Last24h = admin.UsageWindow{Scope: "instance", ByEndpoint: []admin.UsageCount{}}
			out = append(out, ku)
		}
	}
	for _, k := range d.Keys {
		if k.Revoked == nil {
			continue
		}
		created := k.Created
		ku := admin.KeyUsage{ID: k.ID, Account: api.AccountOf(k.ID, k.Account), Plan: k.Plan, Created: &created,
			Expires: k.Expires, NotBefore: k.NotBefore, Revoked: k.Revoked, RevokedBy: k.RevokedBy}
		if a, ok := d.Account(base, ku.Account); ok {
			ku.Plan = a.Plan
		}
		add(ku)
	}
	for _, ch := range d.ConfigKeys {
		if ch.Revoked == nil {
			continue
		}
		ku := admin.KeyUsage{ID: ch.ID, Account: ch.ID, Revoked: ch.Revoked, RevokedBy: ch.RevokedBy}
		if i := slices.IndexFunc(base.Keys, func(k config.Key) bool { return k.ID == ch.ID && k.SHA256 == ch.SHA256 }); i >= 0 {
			k := base.Keys[i]
			ku.Account, ku.Plan, ku.Created, ku.Expires, ku.NotBefore = api.AccountOf(k.ID, k.Account), k.Plan, k.Created, k.Expires, k.NotBefore
			if a, ok := d.Account(base, ku.Account); ok {
				ku.Plan = a.Plan
			}
		}
		add(ku)
	}
	return out
}
