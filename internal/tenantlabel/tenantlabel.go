// Package tenantlabel bounds the tenant labels (account, key_id) of the
// gateway's metrics, so that what /metrics costs does not grow with the
// keys and accounts configured.
//
// By default no series carries a key id: quota, upstream and abandoned
// counters are by account, and only the first MaxAccounts accounts seen by
// the process get a series of their own; later ones share the account
// label Other. An operator names the few keys (DetailKeys) and accounts
// (DetailAccounts) that must keep their own series whatever the limit:
// a detail key's traffic is counted under its key id (and its own account)
// apart from the rest of its account. Per-key figures for every key stay
// in the admin usage API.
package tenantlabel

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// Other is the account label of the accounts past the limit. It is outside
// the id alphabet (letters, digits, '_', '.', '-'), so no account has it.
const Other = "(other)"

// DefaultMaxAccounts is Config.MaxAccounts' default.
const DefaultMaxAccounts = 100

// maxMaxAccounts bounds Config.MaxAccounts: past it a scrape grows by
// megabytes, which is what the limit is for.
const maxMaxAccounts = 10000

// maxDetail bounds each detail list, for the same reason.
const maxDetail = 1000

// Config is the metrics: section of the configuration. The zero value
// gives no account a series of its own (every account's traffic is under
// Other) and no key detail; DefaultConfig has the default limit.
type Config struct {
	// MaxAccounts is how many accounts get series of their own, in the
	// order the process first counts them (0..10000, default 100). A
	// reload that raises it lets more in; one that lowers it keeps the
	// accounts already in until the process restarts.
	MaxAccounts int `yaml:"max_accounts"`
	// DetailKeys are key ids whose traffic keeps series of its own
	// (label key_id) and whose quota gauges are exported. At most 1000.
	DetailKeys []string `yaml:"detail_keys"`
	// DetailAccounts are accounts that always have series of their own,
	// outside MaxAccounts. At most 1000.
	DetailAccounts []string `yaml:"detail_accounts"`
}

// DefaultConfig is the default metrics: section.
func DefaultConfig() Config {
	return Config{MaxAccounts: DefaultMaxAccounts, DetailKeys: []string{}, DetailAccounts: []string{}}
}

// Validate reports every problem in c, one per line, each starting with the
// setting's name (under metrics:).
func (c Config) Validate() error {
	var errs []error
	if c.MaxAccounts < 0 || c.MaxAccounts > maxMaxAccounts {
		errs = append(errs, fmt.Errorf("max_accounts: must be between 0 and %d, got %d", maxMaxAccounts, c.MaxAccounts))
	}
	for _, l := range []struct {
		name string
		ids  []string
	}{{"detail_keys", c.DetailKeys}, {"detail_accounts", c.DetailAccounts}} {
		if len(l.ids) > maxDetail {
			errs = append(errs, fmt.Errorf("%s: at most %d ids, got %d", l.name, maxDetail, len(l.ids)))
		}
		for i, id := range l.ids {
			if id == "" {
				errs = append(errs, fmt.Errorf("%s[%d]: must not be empty", l.name, i))
			}
		}
	}
	return errors.Join(errs...)
}

// Labels decides the account and key_id labels of each counted event.
// Build it with New; a nil *Labels labels every event with its account and
// no key id (no bound: for tools and tests that count a handful of
// accounts). Safe for concurrent use.
type Labels struct {
	cur atomic.Pointer[detail] // the configuration in force

	// admitted holds the accounts (string → struct{}) that have a series
	// of their own by MaxAccounts; it only grows, and never past the
	// largest MaxAccounts configured. n is its size.
	admitted sync.Map
	mu       sync.Mutex // guards admissions (n's increments)
	n        atomic.Int64
}

// detail is a Config made ready for lookups.
type detail struct {
	max      int64
	keys     map[string]struct{}
	accounts map[string]struct{}
}

// New returns the Labels of cfg (which must pass Validate).
func New(cfg Config) *Labels {
	l := &Labels{}
	l.Configure(cfg)
	return l
}

// Configure puts cfg in force (on reload): the detail lists at once, the
// limit for the accounts not yet counted.
func (l *Labels) Configure(cfg Config) {
	d := &detail{max: int64(cfg.MaxAccounts), keys: set(cfg.DetailKeys), accounts: set(cfg.DetailAccounts)}
	l.cur.Store(d)
}

func set(ids []string) map[string]struct{} {
	m := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		m[id] = struct{}{}
	}
	return m
}

// Of returns the labels of an event of key in account: the account (or
// Other) and, for a detail key only, the key id ("" otherwise). A detail
// key always has its own account label.
func (l *Labels) Of(key, account string) (accountLabel, keyLabel string) {
	if l == nil {
		return account, ""
	}
	d := l.cur.Load()
	if len(d.keys) > 0 {
		if _, ok := d.keys[key]; ok {
			return account, key
		}
	}
	return l.account(d, account), ""
}

// Account returns the label of an account-wide event of account: the
// account, or Other past the limit.
func (l *Labels) Account(account string) string {
	if l == nil {
		return account
	}
	return l.account(l.cur.Load(), account)
}

func (l *Labels) account(d *detail, account string) string {
	if _, ok := l.admitted.Load(account); ok {
		return account
	}
	if len(d.accounts) > 0 {
		if _, ok := d.accounts[account]; ok {
			return account
		}
	}
	if l.n.Load() >= d.max { // full: no lock on the common path
		return Other
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.admitted.Load(account); ok {
		return account
	}
	if l.n.Load() >= d.max {
		return Other
	}
	l.admitted.Store(account, struct{}{})
	l.n.Add(1)
	return account
}

// DetailKey reports whether key keeps series of its own.
func (l *Labels) DetailKey(key string) bool {
	if l == nil {
		return false
	}
	_, ok := l.cur.Load().keys[key]
	return ok
}

// DetailAccount reports whether account is in DetailAccounts.
func (l *Labels) DetailAccount(account string) bool {
	if l == nil {
		return false
	}
	_, ok := l.cur.Load().accounts[account]
	return ok
}

// DetailKeys returns the detail keys in force, in no order; none for a nil
// *Labels.
func (l *Labels) DetailKeys() []string {
	if l == nil {
		return nil
	}
	return slices.Collect(maps.Keys(l.cur.Load().keys))
}

// DetailAccounts returns the detail accounts in force, in no order; none
// for a nil *Labels.
func (l *Labels) DetailAccounts() []string {
	if l == nil {
		return nil
	}
	return slices.Collect(maps.Keys(l.cur.Load().accounts))
}

// MaxAccounts returns the limit in force; for a nil *Labels, -1 (none).
func (l *Labels) MaxAccounts() int {
	if l == nil {
		return -1
	}
	return int(l.cur.Load().max)
}
