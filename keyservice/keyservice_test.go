package keyservice

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"trendgate/admin"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/internal/clock"
	"trendgate/keystore"
	"trendgate/proxy"
)

// swapCounter is a Chain that counts the settings put in force.
type swapCounter struct {
	set   *proxy.Settings
	swaps int
}

func (c *swapCounter) Settings() *proxy.Settings { return c.set }

func (c *swapCounter) Swap(set *proxy.Settings) *proxy.Settings {
	old := c.set
	c.set, c.swaps = set, c.swaps+1
	return old
}

// start is a service on a fresh keys file over a configuration of one
// account with one key, started with a chain built from what Open
// returned.
func start(t *testing.T) (*Service, *swapCounter, *prometheus.CounterVec) {
	t.Helper()
	k, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.KeysFile = filepath.Join(t.TempDir(), "keys.yaml")
	cfg.Accounts = []config.Account{{ID: "acme", Plan: "full"}}
	cfg.Keys = []config.Key{{ID: "acme-web", SHA256: auth.Digest(k), Account: "acme"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	applied := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "applied"}, []string{"result"})
	svc, eff, err := Open(cfg, Options{Clock: clock.NewFake(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)),
		Log: zap.NewNop(), Applied: applied})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	set, err := proxy.Compile(eff)
	if err != nil {
		t.Fatal(err)
	}
	chain := &swapCounter{set: set}
	svc.Start(chain)
	return svc, chain, applied
}

func inForce(chain *swapCounter, id string) bool {
	return slices.ContainsFunc(chain.set.Config().Keys, func(k config.Key) bool { return k.ID == id })
}

// TestEditPutInForceOnce: a key edit puts new settings in force once,
// with the key in them; an edit that does not validate changes nothing;
// a revoked key leaves the settings in force and is listed by its
// tombstone.
func TestEditPutInForceOnce(t *testing.T) {
	svc, chain, applied := start(t)
	ctx := context.Background()

	out, err := svc.CreateKey(ctx, "ops", keystore.NewKey{ID: "acme-ci", Account: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if chain.swaps != 1 || !inForce(chain, "acme-ci") {
		t.Fatalf("after a create: %d swaps, acme-ci in force %v; want 1, true", chain.swaps, inForce(chain, "acme-ci"))
	}
	if out.Account != "acme" || out.Plan != "full" || out.Secret == "" {
		t.Errorf("created = %+v; want account acme, plan full, a secret", out)
	}
	if got := testutil.ToFloat64(applied.WithLabelValues("ok")); got != 1 {
		t.Errorf("applied ok = %v; want 1", got)
	}

	_, err = svc.CreateKey(ctx, "ops", keystore.NewKey{ID: "acme-bad", Account: "acme", Plan: "no-such-plan"})
	var kerr *keystore.Error
	if !errors.As(err, &kerr) || kerr.Kind != keystore.Invalid {
		t.Fatalf("create with an unknown plan: %v; want a keystore.Invalid error", err)
	}
	if chain.swaps != 1 || inForce(chain, "acme-bad") {
		t.Fatalf("after a refused create: %d swaps, acme-bad in force %v; want 1, false", chain.swaps, inForce(chain, "acme-bad"))
	}

	if _, err := svc.RevokeKey(ctx, "ops", "acme-ci"); err != nil {
		t.Fatal(err)
	}
	if chain.swaps != 2 || inForce(chain, "acme-ci") {
		t.Fatalf("after a revoke: %d swaps, acme-ci in force %v; want 2, false", chain.swaps, inForce(chain, "acme-ci"))
	}
	ks := svc.RevokedKeys("", func(id string) bool { return inForce(chain, id) })
	if len(ks) != 1 || ks[0].ID != "acme-ci" || ks[0].State != admin.StateRevoked || ks[0].RevokedBy != "ops" || ks[0].Account != "acme" {
		t.Errorf("revoked keys = %+v; want acme-ci of acme, revoked by ops", ks)
	}
}
