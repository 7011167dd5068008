package gateway_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"trendgate/admin"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/keystore"
)

// TestRevokedIDNotReused is issue 41's reuse sequence through the admin
// listener: a key cx of plan full, rotated, both keys revoked, then
// POST /keys {"id":"cx","plan":"limited"}. It used to answer 201 with
// plan full, in the old customer's account. It must be refused while the
// tombstone lasts, and after it too (the account cx the rotation wrote out
// still holds the id); naming the account gives a key checked as a
// configured one.
func TestRevokedIDNotReused(t *testing.T) {
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			keysFile := filepath.Join(t.TempDir(), "keys.yaml")
			var a, b *gatewaytest.Harness
			if mode == "single" {
				a = gatewaytest.New(t, withAccount(keysFile))
				b = a
			} else {
				c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 2, Mutate: withAccount(keysFile)})
				a, b = c.Nodes[0], c.Nodes[1]
			}
			sync := func() {
				t.Helper()
				if err := b.Gateway.Keys().SyncKeys(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			var cx, r1 admin.CreatedKey
			if code, ec := adminSend(t, a.Admin, http.MethodPost, "/keys", `{"id":"cx","plan":"full"}`, &cx); code != http.StatusCreated {
				t.Fatalf("POST /keys cx: %d %s", code, ec)
			}
			if code, ec := adminSend(t, a.Admin, http.MethodPost, "/keys/cx/rotate", `{"overlap":"1h"}`, &r1); code != http.StatusCreated {
				t.Fatalf("rotate cx: %d %s", code, ec)
			}
			for _, id := range []string{"cx", r1.ID} {
				if code, ec := adminSend(t, a.Admin, http.MethodDelete, "/keys/"+id, "", nil); code != http.StatusOK {
					t.Fatalf("revoke %s: %d %s", id, code, ec)
				}
			}
			sync()
			if got := status(b, cx.Secret); got != http.StatusUnauthorized {
				t.Fatalf("the revoked key cx on the public listener: %d, want 401", got)
			}
			if code, ec := adminSend(t, b.Admin, http.MethodPost, "/keys", `{"id":"cx","plan":"limited"}`, nil); code != http.StatusConflict || ec != "key_id_revoked" {
				t.Fatalf("POST /keys reusing the revoked id cx: %d %s, want 409 key_id_revoked", code, ec)
			}
			if !strings.Contains(b.Logs.String()+a.Logs.String(), `"action":"revoke","admin":"admin.token","key":"cx"`) {
				t.Fatal("no audit line for the revocation of cx")
			}
			// Naming the account: a key of account cx, on its plan, or a
			// plan that differs from it refused.
			if code, ec := adminSend(t, b.Admin, http.MethodPost, "/keys", `{"id":"cx","account":"cx","plan":"limited"}`, nil); code != http.StatusBadRequest || ec != "invalid_key_change" {
				t.Fatalf("POST /keys cx into account cx with another plan: %d %s, want 400", code, ec)
			}
			// Past the retention the id is free of its tombstone, but the
			// account the rotation wrote out still has it.
			a.Clock.Advance(config.Default().RevokedKeyRetention + time.Hour)
			if code, ec := adminSend(t, b.Admin, http.MethodPost, "/keys", `{"id":"cx","plan":"limited"}`, nil); code != http.StatusConflict || ec != "key_id_taken" {
				t.Fatalf("POST /keys cx after the retention: %d %s, want 409 key_id_taken (account cx has the id)", code, ec)
			}
			var again admin.CreatedKey
			if code, ec := adminSend(t, b.Admin, http.MethodPost, "/keys", `{"id":"cx","account":"cx"}`, &again); code != http.StatusCreated {
				t.Fatalf("POST /keys cx naming account cx: %d %s", code, ec)
			}
			if again.Account != "cx" || again.Plan != "full" {
				t.Fatalf("the key made naming account cx = %+v; want account cx, plan full", again)
			}
			if err := a.Gateway.Keys().SyncKeys(t.Context()); err != nil {
				t.Fatal(err)
			}
			for _, h := range []*gatewaytest.Harness{a, b} {
				if got := status(h, again.Secret); got != http.StatusOK {
					t.Fatalf("the new key cx on the public listener: %d", got)
				}
			}
		})
	}
}

// TestRotateOnlyActive checks that only a key in force can be rotated (a
// disabled key used to be rotated into an active one) and that the ids
// "." and "..", which no URL path can carry, are refused with a 400.
func TestRotateOnlyActive(t *testing.T) {
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	h := gatewaytest.New(t, func(cfg *config.Config) {
		withAccount(keysFile)(cfg)
		cfg.Keys = append(cfg.Keys, config.Key{ID: "off", SHA256: cfg.Keys[0].SHA256[:63] + "0", Account: "acme", Disabled: true})
		if cfg.Keys[len(cfg.Keys)-1].SHA256 == cfg.Keys[0].SHA256 {
			cfg.Keys[len(cfg.Keys)-1].SHA256 = cfg.Keys[0].SHA256[:63] + "1"
		}
	})
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"rotate a disabled key", http.MethodPost, "/keys/off/rotate", `{}`, 409, "key_not_active"},
		{"create the id .", http.MethodPost, "/keys", `{"id":".","account":"acme"}`, 400, "invalid_key_change"},
		{"create the id ..", http.MethodPost, "/keys", `{"id":"..","account":"acme"}`, 400, "invalid_key_change"},
		{"rotate into the id ..", http.MethodPost, "/keys/team-full/rotate", `{"new_id":".."}`, 400, "invalid_key_change"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, ec := adminSend(t, h.Admin, tc.method, tc.path, tc.body, nil); code != tc.status || ec != tc.code {
				t.Fatalf("%s %s: %d %s, want %d %s", tc.method, tc.path, code, ec, tc.status, tc.code)
			}
		})
	}
	if b, _ := os.ReadFile(keysFile); len(b) != 0 {
		t.Fatalf("a refused change wrote the keys file:\n%s", b)
	}
	// An expired key cannot be rotated either.
	var k admin.CreatedKey
	exp := h.Clock.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if code, ec := adminSend(t, h.Admin, http.MethodPost, "/keys", `{"id":"short","account":"acme","expires":"`+exp+`"}`, &k); code != http.StatusCreated {
		t.Fatalf("POST /keys short: %d %s", code, ec)
	}
	h.Clock.Advance(2 * time.Hour)
	if code, ec := adminSend(t, h.Admin, http.MethodPost, "/keys/short/rotate", `{}`, nil); code != 409 || ec != "key_not_active" {
		t.Fatalf("rotate an expired key: %d %s, want 409 key_not_active", code, ec)
	}
}

// TestKeysFileIsALog checks that each change appends one record to
// keys_file instead of writing it whole, and that a gateway started on
// the file finds every change.
func TestKeysFileIsALog(t *testing.T) {
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	h := gatewaytest.New(t, withAccount(keysFile))
	var secrets []string
	sizes := []int64{}
	for _, id := range []string{"l1", "l2", "l3"} {
		var k admin.CreatedKey
		if code, ec := adminSend(t, h.Admin, http.MethodPost, "/keys", `{"id":"`+id+`","account":"acme"}`, &k); code != http.StatusCreated {
			t.Fatalf("POST /keys %s: %d %s", id, code, ec)
		}
		secrets = append(secrets, k.Secret)
		fi, err := os.Stat(keysFile)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fi.Size())
	}
	if code, ec := adminSend(t, h.Admin, http.MethodDelete, "/keys/l2", "", nil); code != http.StatusOK {
		t.Fatalf("DELETE /keys/l2: %d %s", code, ec)
	}
	// Each create adds one record of about the same size.
	if d1, d2 := sizes[1]-sizes[0], sizes[2]-sizes[1]; d1 <= 0 || d2 != d1 {
		t.Fatalf("keys_file grew by %d then %d bytes; want one record each", d1, d2)
	}
	b, err := os.ReadFile(keysFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if strings.Contains(string(b), s) {
			t.Fatal("keys_file holds a secret")
		}
	}
	d, err := keystore.Load(keysFile)
	if err != nil || d.Version != 4 {
		t.Fatalf("keys_file read back: version %v, %v; want 4", d, err)
	}
	// Another gateway on the same file serves the same keys.
	cfg := *h.Config
	g, _ := gatewaytest.Build(t, h.Clock, &cfg)
	defer g.Close()
	want := map[string]int{secrets[0]: 200, secrets[1]: 401, secrets[2]: 200}
	for s, code := range want {
		rec := &gatewaytest.DiscardWriter{Hdr: http.Header{}}
		req, _ := http.NewRequest(http.MethodGet, listPath, nil)
		req.Header.Set("Authorization", "Bearer "+s)
		g.ServeHTTP(rec, req)
		if rec.Status != code && !(code == 200 && rec.Status == 0) {
			t.Errorf("a gateway started on the keys file answers %d; want %d", rec.Status, code)
		}
	}
}

// TestKeyEditsInForceMatchTheDoc makes every kind of key API change and
// checks after each that the keys and accounts in force, changed one
// patch at a time, are those the whole keys file laid over the
// configuration gives (what a restart or a reload would build).
func TestKeyEditsInForceMatchTheDoc(t *testing.T) {
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	h := gatewaytest.New(t, withAccount(keysFile))
	steps := []struct{ method, path, body string }{
		{http.MethodPost, "/keys", `{"id":"e1","account":"acme"}`},
		{http.MethodPost, "/keys", `{"id":"own","plan":"limited"}`},
		{http.MethodPost, "/keys/own/rotate", `{"overlap":"1h"}`},
		{http.MethodPatch, "/accounts/acme", `{"daily":77,"per_second":3,"burst":9}`},
		{http.MethodPatch, "/accounts/own", `{"monthly":1234}`},
		{http.MethodDelete, "/keys/e1", ""},
		{http.MethodDelete, "/keys/team-limited", ""},
		{http.MethodPost, "/keys/team-full/rotate", `{"new_id":"tf2","overlap":"2h"}`},
		{http.MethodPatch, "/accounts/acme", `{"daily":null}`},
		{http.MethodPost, "/keys", `{"id":"e1","account":"acme"}`},
	}
	for _, st := range steps {
		if code, ec := adminSend(t, h.Admin, st.method, st.path, st.body, nil); code >= 300 {
			t.Fatalf("%s %s: %d %s", st.method, st.path, code, ec)
		}
		d, err := keystore.Load(keysFile)
		if err != nil {
			t.Fatal(err)
		}
		want := d.Apply(h.Config)
		got := h.Gateway.Config()
		if len(got.Keys) != len(want.Keys) || len(got.Accounts) != len(want.Accounts) {
			t.Fatalf("after %s %s: %d keys, %d accounts in force; the file gives %d, %d",
				st.method, st.path, len(got.Keys), len(got.Accounts), len(want.Keys), len(want.Accounts))
		}
		for _, w := range want.Keys {
			i := slices.IndexFunc(got.Keys, func(k config.Key) bool { return k.ID == w.ID })
			if i < 0 || !got.Keys[i].Equal(w) {
				t.Fatalf("after %s %s: key %s in force differs from the file's %+v", st.method, st.path, w.ID, w)
			}
		}
		for _, w := range want.Accounts {
			i := slices.IndexFunc(got.Accounts, func(a config.Account) bool { return a.ID == w.ID })
			if i < 0 || !got.Accounts[i].Equal(w) {
				t.Fatalf("after %s %s: account %s in force differs from the file's", st.method, st.path, w.ID)
			}
		}
	}
}

// TestRevokedKeysStayVisible: GET /keys/{id} of a revoked key used to
// answer 404 unknown_key. It answers 200 with state revoked, when and by
// whom, for a key made through the API and for one of the file; GET /keys
// lists them, and they count in no account.
func TestRevokedKeysStayVisible(t *testing.T) {
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	h := gatewaytest.New(t, withAccount(keysFile))
	if code, ec := adminSend(t, h.Admin, http.MethodPost, "/keys", `{"id":"gone","account":"acme"}`, nil); code != http.StatusCreated {
		t.Fatalf("POST /keys: %d %s", code, ec)
	}
	for _, id := range []string{"gone", "team-limited"} {
		if code, ec := adminSend(t, h.Admin, http.MethodDelete, "/keys/"+id, "", nil); code != http.StatusOK {
			t.Fatalf("DELETE /keys/%s: %d %s", id, code, ec)
		}
	}
	for _, tc := range []struct{ id, account, plan string }{{"gone", "acme", "full"}, {"team-limited", "team-limited", "limited"}} {
		var ku admin.KeyUsage
		if code, ec := adminSend(t, h.Admin, http.MethodGet, "/keys/"+tc.id, "", &ku); code != http.StatusOK {
			t.Fatalf("GET /keys/%s of a revoked key: %d %s, want 200", tc.id, code, ec)
		}
		if ku.State != "revoked" || ku.Revoked == nil || ku.RevokedBy != "admin.token" || ku.Account != tc.account || ku.Plan != tc.plan {
			t.Fatalf("GET /keys/%s = %+v; want state revoked by admin.token, account %s, plan %s", tc.id, ku, tc.account, tc.plan)
		}
	}
	var list admin.KeyList
	if code, ec := adminSend(t, h.Admin, http.MethodGet, "/keys", "", &list); code != http.StatusOK {
		t.Fatalf("GET /keys: %d %s", code, ec)
	}
	states := map[string]string{}
	for _, k := range list.Keys {
		states[k.ID] = k.State
	}
	if states["gone"] != "revoked" || states["team-limited"] != "revoked" || states["team-full"] != "active" {
		t.Fatalf("GET /keys states = %v", states)
	}
	var accounts admin.AccountList
	if code, ec := adminSend(t, h.Admin, http.MethodGet, "/accounts", "", &accounts); code != http.StatusOK {
		t.Fatalf("GET /accounts: %d %s", code, ec)
	}
	for _, a := range accounts.Accounts {
		if slices.Contains(a.Keys, "gone") || a.ID == "team-limited" {
			t.Fatalf("a revoked key counts in account %+v", a)
		}
	}
	if code, ec := adminSend(t, h.Admin, http.MethodGet, "/keys/never", "", nil); code != http.StatusNotFound || ec != "unknown_key" {
		t.Fatalf("GET /keys/never: %d %s, want 404 unknown_key", code, ec)
	}
}

// TestAccountsAPI: POST /accounts used to be 404. An account made on one
// instance is in force on the other after its poll, is checked as a
// configured one, keeps its keys, writes audit lines, and DELETE refuses
// it while a key names it.
func TestAccountsAPI(t *testing.T) {
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			keysFile := filepath.Join(t.TempDir(), "keys.yaml")
			var a, b *gatewaytest.Harness
			if mode == "single" {
				a = gatewaytest.New(t, withAccount(keysFile))
				b = a
			} else {
				c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 2, Mutate: withAccount(keysFile)})
				a, b = c.Nodes[0], c.Nodes[1]
			}
			var got admin.AccountSettings
			if code, ec := adminSend(t, a.Admin, http.MethodPost, "/accounts", `{"id":"globex","plan":"limited","daily":40}`, &got); code != http.StatusCreated {
				t.Fatalf("POST /accounts: %d %s", code, ec)
			}
			if got.ID != "globex" || got.Plan != "limited" || got.Daily != 40 {
				t.Fatalf("POST /accounts = %+v", got)
			}
			for _, tc := range []struct {
				body, code string
				status     int
			}{
				{`{"id":"globex","plan":"full"}`, "key_id_taken", 409},
				{`{"id":"team-full","plan":"full"}`, "key_id_taken", 409},
				{`{"id":"x","plan":"gold"}`, "invalid_key_change", 400},
				{`{"id":"..","plan":"full"}`, "invalid_key_change", 400},
				{`{"id":"y","plan":"limited","burst":1}`, "invalid_key_change", 400}, // below the whatsup cost, as in a file
			} {
				if code, ec := adminSend(t, a.Admin, http.MethodPost, "/accounts", tc.body, nil); code != tc.status || ec != tc.code {
					t.Fatalf("POST /accounts %s: %d %s, want %d %s", tc.body, code, ec, tc.status, tc.code)
				}
			}
			if err := b.Gateway.Keys().SyncKeys(t.Context()); err != nil {
				t.Fatal(err)
			}
			var k admin.CreatedKey
			if code, ec := adminSend(t, b.Admin, http.MethodPost, "/keys", `{"id":"globex-1","account":"globex"}`, &k); code != http.StatusCreated || k.Plan != "limited" {
				t.Fatalf("POST /keys into globex on B: %d %s %+v", code, ec, k)
			}
			if code, ec := adminSend(t, b.Admin, http.MethodDelete, "/accounts/globex", "", nil); code != http.StatusConflict || ec != "account_in_use" {
				t.Fatalf("DELETE /accounts/globex with a key: %d %s, want 409 account_in_use", code, ec)
			}
			if code, ec := adminSend(t, b.Admin, http.MethodDelete, "/accounts/acme", "", nil); code != http.StatusConflict || ec != "account_in_use" {
				t.Fatalf("DELETE /accounts/acme (configured): %d %s, want 409", code, ec)
			}
			if code, _ := adminSend(t, b.Admin, http.MethodDelete, "/keys/globex-1", "", nil); code != http.StatusOK {
				t.Fatal("revoke globex-1")
			}
			if code, ec := adminSend(t, b.Admin, http.MethodDelete, "/accounts/globex", "", nil); code != http.StatusOK {
				t.Fatalf("DELETE /accounts/globex: %d %s", code, ec)
			}
			if err := a.Gateway.Keys().SyncKeys(t.Context()); err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(a.Gateway.Config().Accounts, func(ac config.Account) bool { return ac.ID == "globex" }) {
				t.Fatal("the deleted account is in force on A")
			}
			logs := a.Logs.String() + b.Logs.String()
			for _, line := range []string{`"action":"create_account","admin":"admin.token","account":"globex"`, `"action":"delete_account","admin":"admin.token","account":"globex"`} {
				if !strings.Contains(logs, line) {
					t.Fatalf("no audit line %s", line)
				}
			}
		})
	}
}
