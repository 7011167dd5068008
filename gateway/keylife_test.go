package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"trendgate/admin"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// TestKeyNotBefore: a key is refused (the same 401 as any invalid key)
// until its not_before, then accepted; GET /keys says not_yet_valid, then
// active, and reports created, never the secret.
func TestKeyNotBefore(t *testing.T) {
	next := gatewaytest.NewKey(t)
	var from, created time.Time
	h := gatewaytest.New(t, func(cfg *config.Config) {
		from, created = gatewaytest.Now.Add(time.Hour), gatewaytest.Now.Add(-time.Hour)
		cfg.Keys = append(cfg.Keys, config.Key{ID: "next", SHA256: auth.Digest(next), Plan: "full", NotBefore: &from, Created: &created})
	})
	state := func() admin.KeyUsage {
		resp, body := h.AdminDo(http.MethodGet, "/keys/next", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /keys/next: %d %s", resp.StatusCode, body)
		}
		var k admin.KeyUsage
		if err := json.Unmarshal(body, &k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	if resp, body := h.Get("/api4/public/topics/list/v1", next); resp.StatusCode != http.StatusUnauthorized || errorCode(body) != "invalid_api_key" {
		t.Fatalf("before not_before: %d %s; want 401 invalid_api_key", resp.StatusCode, body)
	}
	if k := state(); k.State != "not_yet_valid" || k.NotBefore == nil || !k.NotBefore.Equal(from) || k.Created == nil || !k.Created.Equal(created) {
		t.Errorf("before: got %+v; want state not_yet_valid with not_before and created", k)
	}
	h.Clock.Advance(time.Hour)
	if resp, body := h.Get("/api4/public/topics/list/v1", next); resp.StatusCode != http.StatusOK {
		t.Fatalf("at not_before: %d %s; want 200", resp.StatusCode, body)
	}
	// The request is counted once its answer is written: wait for that.
	var k admin.KeyUsage
	gatewaytest.PollUntil(func() bool { k = state(); return k.LastUsed != nil })
	if k.State != "active" || k.LastUsed == nil || !k.LastUsed.Equal(h.Clock.Now()) {
		t.Errorf("after: got state %q, last_used %v; want active, %v", k.State, k.LastUsed, h.Clock.Now())
	}
}

// TestLastUsedClusterWide: a key used only on one instance shows its
// last_used on the other once the first has shared it (every 30 s, and on
// SyncLastUsed), without a Redis write per request.
func TestLastUsedClusterWide(t *testing.T) {
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 2})
	if r := c.Send(0, "/api4/public/topics/list/v1", c.Full); r.Status != http.StatusOK {
		t.Fatalf("request on node 0: %d %s", r.Status, r.Code)
	}
	used := c.Clock.Now().Truncate(time.Second)
	usage := func(node int) admin.KeyUsage {
		resp, body := c.Nodes[node].AdminDo(http.MethodGet, "/keys/team-full", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /keys/team-full on node %d: %d %s", node, resp.StatusCode, body)
		}
		var k admin.KeyUsage
		if err := json.Unmarshal(body, &k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	lastUsed := func(node int) *time.Time { return usage(node).LastUsed }
	if got := lastUsed(1); got != nil {
		t.Fatalf("node 1 before any sync: last_used %v; want null", got)
	}
	// Node 0 counts the request once its response is written: wait for
	// that before asking it to share.
	if !gatewaytest.PollUntil(func() bool { return usage(0).LastSeen != nil }) {
		t.Fatal("node 0 never counted the request")
	}
	if err := c.Nodes[0].Gateway.SyncLastUsed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(1); got == nil || !got.Equal(used) {
		t.Errorf("node 1 after node 0 synced: last_used %v; want %v", got, used)
	}
}
