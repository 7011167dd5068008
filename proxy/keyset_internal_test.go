package proxy

import (
	"fmt"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
)

// TestRecompileMatchesCompile changes keys the ways a reload can (added,
// removed, disabled, moved to another plan or account, given a rate) and
// checks that the settings Recompile makes from the previous ones answer
// every key's token, and give it the policy, as Compile's do.
func TestRecompileMatchesCompile(t *testing.T) {
	base := config.Default()
	daily := int64(900)
	base.Accounts = []config.Account{{ID: "team", Plan: "full", Daily: &daily}}
	secrets := map[string]string{}
	for i := range 30 {
		s, err := auth.Generate()
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("k%d", i)
		secrets[id] = s
		k := config.Key{ID: id, SHA256: auth.Digest(s), Plan: "limited"}
		if i%3 == 0 {
			k.Plan, k.Account = "", "team"
		}
		base.Keys = append(base.Keys, k)
	}
	rate := 2.5
	burst := 7
	for _, tc := range []struct {
		name   string
		change func(c *config.Config)
	}{
		{"nothing", func(c *config.Config) {}},
		{"a key added", func(c *config.Config) {
			s, _ := auth.Generate()
			secrets["new"] = s
			c.Keys = append(c.Keys, config.Key{ID: "new", SHA256: auth.Digest(s), Plan: "full"})
		}},
		{"a key removed", func(c *config.Config) { c.Keys = append(c.Keys[:4:4], c.Keys[5:]...) }},
		{"a key disabled", func(c *config.Config) { c.Keys[7].Disabled = true }},
		{"a key on another plan", func(c *config.Config) { c.Keys[8].Plan = "full" }},
		{"a key into the account", func(c *config.Config) { c.Keys[10].Plan, c.Keys[10].Account = "", "team" }},
		{"a key given a rate", func(c *config.Config) { c.Keys[11].PerSecond, c.Keys[11].Burst = &rate, &burst }},
		{"keys reordered", func(c *config.Config) { c.Keys[1], c.Keys[2] = c.Keys[2], c.Keys[1] }},
		{"the account's quota", func(c *config.Config) { d := int64(5); c.Accounts[0].Daily = &d }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev, err := Compile(base)
			if err != nil {
				t.Fatal(err)
			}
			cur := *base
			cur.Keys = append([]config.Key(nil), base.Keys...)
			cur.Accounts = append([]config.Account(nil), base.Accounts...)
			tc.change(&cur)
			if err := cur.Validate(); err != nil {
				t.Fatal(err)
			}
			got, err := Recompile(prev, &cur)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Compile(&cur)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
			if got.keyring.Len() != want.keyring.Len() {
				t.Fatalf("keyring holds %d keys; want %d", got.keyring.Len(), want.keyring.Len())
			}
			for id, s := range secrets {
				gp, gerr := got.keyring.Authenticate(s, now)
				wp, werr := want.keyring.Authenticate(s, now)
				if gp != wp || auth.ReasonOf(gerr) != auth.ReasonOf(werr) {
					t.Errorf("key %s: Recompile's keyring says %+v, %v; Compile's %+v, %v", id, gp, gerr, wp, werr)
				}
				if werr == nil && got.policies.get(id) != want.policies.get(id) {
					t.Errorf("key %s: policy %+v; want %+v", id, got.policies.get(id), want.policies.get(id))
				}
			}
		})
	}
}
