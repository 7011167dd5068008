package tenantlabel

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestOf(t *testing.T) {
	l := New(Config{MaxAccounts: 2, DetailKeys: []string{"watched"}, DetailAccounts: []string{"vip"}})
	tests := []struct {
		name, key, account string
		wantAccount        string
		wantKey            string
	}{
		{"first account", "a1", "acme", "acme", ""},
		{"second account", "b1", "beta", "beta", ""},
		{"an account past the limit", "c1", "gamma", Other, ""},
		{"an account already in, another key", "a2", "acme", "acme", ""},
		{"a detail account past the limit", "v1", "vip", "vip", ""},
		{"a detail key of an account past the limit", "watched", "delta", "delta", "watched"},
		{"the account past the limit stays out", "c2", "gamma", Other, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, k := l.Of(tc.key, tc.account)
			if a != tc.wantAccount || k != tc.wantKey {
				t.Errorf("Of(%q, %q): got %q, %q; want %q, %q", tc.key, tc.account, a, k, tc.wantAccount, tc.wantKey)
			}
		})
	}
}

// TestConfigure checks what a reload changes: the detail lists at once, a
// raised limit for the accounts not yet counted, a lowered one for none
// already in.
func TestConfigure(t *testing.T) {
	l := New(Config{MaxAccounts: 1})
	l.Of("a1", "acme")
	if a, k := l.Of("w", "beta"); a != Other || k != "" {
		t.Fatalf("before the reload: got %q, %q; want %q, \"\"", a, k, Other)
	}
	l.Configure(Config{MaxAccounts: 2, DetailKeys: []string{"w"}, DetailAccounts: []string{"x", "y"}})
	if keys, accounts := l.DetailKeys(), l.DetailAccounts(); len(keys) != 1 || keys[0] != "w" || len(accounts) != 2 {
		t.Errorf("detail lists after the reload: %v, %v; want [w] and x, y", keys, accounts)
	}
	if a, k := l.Of("w", "beta"); a != "beta" || k != "w" {
		t.Errorf("a key made detail by reload: got %q, %q; want \"beta\", \"w\"", a, k)
	}
	if a := l.Account("gamma"); a != "gamma" {
		t.Errorf("an account under the raised limit: got %q; want \"gamma\"", a)
	}
	l.Configure(Config{MaxAccounts: 0})
	if a := l.Account("acme"); a != "acme" {
		t.Errorf("an account already in after the limit was lowered: got %q; want \"acme\"", a)
	}
	if a := l.Account("delta"); a != Other {
		t.Errorf("a new account after the limit was lowered: got %q; want %q", a, Other)
	}
	if a, k := l.Of("w", "beta"); a != Other || k != "" {
		t.Errorf("a key no longer detail, of an account never counted as its own: got %q, %q; want %q, \"\"", a, k, Other)
	}
}

// TestBoundUnderConcurrency checks that accounts counted at once from many
// goroutines never take more than MaxAccounts labels.
func TestBoundUnderConcurrency(t *testing.T) {
	const max = 10
	l := New(Config{MaxAccounts: max})
	var wg sync.WaitGroup
	var mu sync.Mutex
	own := map[string]bool{}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				acct := fmt.Sprintf("acct-%d", (i*7+g)%100)
				if got := l.Account(acct); got != Other {
					mu.Lock()
					own[got] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(own) != max {
		t.Errorf("got %d accounts with labels of their own; want %d", len(own), max)
	}
}

func TestNil(t *testing.T) {
	var l *Labels
	if a, k := l.Of("k", "acme"); a != "acme" || k != "" {
		t.Errorf("nil Of: got %q, %q; want \"acme\", \"\"", a, k)
	}
	if l.DetailKey("k") || l.DetailAccount("acme") || l.MaxAccounts() != -1 || l.DetailKeys() != nil || l.DetailAccounts() != nil {
		t.Errorf("nil: got detail or a limit; want none")
	}
}

func TestValidate(t *testing.T) {
	many := make([]string, maxDetail+1)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	tests := []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{"default", DefaultConfig(), ""},
		{"zero", Config{}, ""},
		{"negative limit", Config{MaxAccounts: -1}, "max_accounts: must be between 0 and 10000"},
		{"limit too high", Config{MaxAccounts: 10001}, "max_accounts: must be between 0 and 10000"},
		{"empty detail key", Config{DetailKeys: []string{"a", ""}}, "detail_keys[1]: must not be empty"},
		{"empty detail account", Config{DetailAccounts: []string{""}}, "detail_accounts[0]: must not be empty"},
		{"too many detail keys", Config{DetailKeys: many}, "detail_keys: at most 1000 ids"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v; want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// BenchmarkOf is the labels' cost on the hit path: an account already in,
// and one past the limit.
func BenchmarkOf(b *testing.B) {
	l := New(Config{MaxAccounts: 1})
	l.Of("a", "acme")
	for _, acct := range []string{"acme", "beyond"} {
		b.Run(acct, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l.Of("k", acct)
			}
		})
	}
}
