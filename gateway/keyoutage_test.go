package gateway_test

import (
	"net/http"
	"path/filepath"
	"testing"

	"trendgate/admin"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/redistest"
)

// TestRevokeDuringRedisOutage: while Redis was unreachable a key made
// through the API could not be revoked at all (503). Now the instance
// asked denies the key at once and answers 202 pending; once Redis is
// back its next poll stores the revocation and the other instance
// refuses the key too.
func TestRevokeDuringRedisOutage(t *testing.T) {
	srv := redistest.StartServer(t, false)
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 2, Addr: srv.Addr(),
		Mutate: withAccount(filepath.Join(t.TempDir(), "keys.yaml"))})
	a, b := c.Nodes[0], c.Nodes[1]
	var k admin.CreatedKey
	if code, ec := adminSend(t, a.Admin, http.MethodPost, "/keys", `{"id":"leaked","account":"acme"}`, &k); code != http.StatusCreated {
		t.Fatalf("POST /keys: %d %s", code, ec)
	}
	if err := b.Gateway.Keys().SyncKeys(t.Context()); err != nil {
		t.Fatal(err)
	}
	if status(b, k.Secret) != http.StatusOK {
		t.Fatal("the new key does not work on B")
	}

	srv.Stop()
	var r admin.RevokedKey
	if code, ec := adminSend(t, a.Admin, http.MethodDelete, "/keys/leaked", "", &r); code != http.StatusAccepted || !r.Pending {
		t.Fatalf("DELETE /keys/leaked with Redis down: %d %s %+v, want 202 pending", code, ec, r)
	}
	if got := status(a, k.Secret); got != http.StatusUnauthorized {
		t.Fatalf("the key revoked on A while Redis is down, on A: %d, want 401", got)
	}
	// Another change cannot be stored, and does not undo the deny.
	if code, ec := adminSend(t, a.Admin, http.MethodPost, "/keys", `{"id":"other","account":"acme"}`, nil); code != http.StatusServiceUnavailable {
		t.Fatalf("POST /keys with Redis down: %d %s, want 503", code, ec)
	}
	if got := status(a, k.Secret); got != http.StatusUnauthorized {
		t.Fatalf("after a refused create, the denied key on A: %d, want 401", got)
	}

	srv.Start()
	if err := a.Gateway.Keys().SyncKeys(t.Context()); err != nil {
		t.Fatalf("A's poll with Redis back: %v", err)
	}
	if err := b.Gateway.Keys().SyncKeys(t.Context()); err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]*gatewaytest.Harness{"A": a, "B": b} {
		if got := status(h, k.Secret); got != http.StatusUnauthorized {
			t.Fatalf("the revocation merged once Redis is back, on %s: %d, want 401", name, got)
		}
	}
	var ku admin.KeyUsage
	if code, _ := adminSend(t, b.Admin, http.MethodGet, "/keys/leaked", "", &ku); code != http.StatusOK || ku.State != "revoked" {
		t.Fatalf("GET /keys/leaked on B: %d %+v, want revoked", code, ku)
	}
}
