package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"trendgate/admin"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/internal/clock"
)

// usageGateway runs a gateway on the demo upstream with one key that made
// two requests, and serves its admin routes; it returns the admin URL.
func usageGateway(t *testing.T, token string) string {
	t.Helper()
	now := time.Date(2026, 11, 19, 10, 30, 0, 0, time.UTC)
	clk := clock.NewFake(now)
	up, err := demo.New(demo.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); upSrv.Close() })
	key, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Upstream.BaseURL = upSrv.URL
	cfg.Admin.Token = token
	cfg.Keys = []config.Key{{ID: "team-a", SHA256: auth.Digest(key), Plan: "full"}, {ID: "team-b", SHA256: auth.Digest(newSecret(t)), Plan: "limited", Disabled: true}}
	g, err := gateway.New(cfg, gateway.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	for _, path := range []string{"/api4/public/topic/bitcoin/whatsup/v1", "/api4/public/topics/list/v1"} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, w.Code, w.Body)
		}
	}
	srv := httptest.NewServer(g.AdminHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func newSecret(t *testing.T) string {
	t.Helper()
	s, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestKeysUsage(t *testing.T) {
	base := usageGateway(t, "")
	tests := []struct {
		name    string
		args    []string
		wantErr string
		want    []string // lines or fragments of the output, in order
	}{
		{name: "table", args: []string{"-admin", base}, want: []string{
			"ID      ACCOUNT  PLAN     STATE     DAILY USED/LIMIT  MONTHLY USED/LIMIT  TOKENS/BURST  24H REQUESTS  24H UNITS  24H UPSTREAM  LAST SEEN             SOURCE",
			"team-a  team-a   full     active    6/100000          6/2000000           34/40         2             6          2             2026-11-19T10:30:00Z  local",
			"team-b  team-b   limited  disabled  0/5000            0/100000            10/10         0             0          0             never                 local",
		}},
		{name: "one key with detail", args: []string{"-admin", base + "/", "-id", "team-a"}, want: []string{
			"team-a  team-a   full  active",
			"team-a: daily quota resets 2026-11-20T00:00:00Z, monthly 2026-12-01T00:00:00Z; last 24 h (this instance) since 2026-11-18T11:00:00Z:",
			"ENDPOINT  STATUS  REQUESTS  UNITS",
			"    list     2xx         1      1",
			" whatsup     2xx         1      5",
		}},
		{name: "unknown id", args: []string{"-admin", base, "-id", "nobody"}, wantErr: "answered 404 unknown_key: no configured key has this id"},
		{name: "stray argument", args: []string{"-admin", base, "team-a"}, wantErr: `unexpected argument "team-a"`},
		{name: "nothing listening", args: []string{"-admin", "http://" + closedAddr(t)}, wantErr: "connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(append([]string{"keys", "usage"}, tc.args...), nil, &out, &out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rest := out.String()
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("output lacks %q (in order):\n%s", w, out.String())
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestKeysUsageJSONAndToken(t *testing.T) {
	base := usageGateway(t, "admin-secret")
	var out bytes.Buffer
	err := run([]string{"keys", "usage", "-admin", base, "-json"}, nil, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "401 invalid_admin_token") || !strings.Contains(err.Error(), adminTokenEnv) {
		t.Fatalf("without the token: got %v; want a 401 naming $%s", err, adminTokenEnv)
	}
	t.Setenv(adminTokenEnv, "admin-secret")
	out.Reset()
	if err := run([]string{"keys", "usage", "-admin", base, "-json"}, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	var list admin.KeyList
	if err := json.Unmarshal(out.Bytes(), &list); err != nil || len(list.Keys) != 2 || list.Keys[0].Daily.Used != 6 {
		t.Fatalf("got %v %s; want the /keys JSON with team-a at 6 units", err, out.String())
	}
	if !strings.Contains(out.String(), "\n  \"keys\": [") {
		t.Errorf("got JSON not indented:\n%s", out.String())
	}
}

// TestKeysUsagePages: keys usage reads every key of a gateway with more
// keys than one page holds (it used to read one answer, at most 32 MiB),
// and the filters reach the admin API.
func TestKeysUsagePages(t *testing.T) {
	const n = 2*usagePageLimit + 5
	cfg := config.Default()
	cfg.Upstream.BaseURL = "http://127.0.0.1:1" // never called
	cfg.Accounts = []config.Account{{ID: "crowd", Plan: "limited"}}
	for i := range n {
		k := config.Key{ID: fmt.Sprintf("k%05d", i), SHA256: fmt.Sprintf("%064x", i+1), Account: "crowd"}
		if i%2 == 1 {
			k.Disabled = true
		}
		cfg.Keys = append(cfg.Keys, k)
	}
	g, err := gateway.New(cfg, gateway.Options{Clock: clock.NewFake(time.Date(2026, 11, 19, 10, 30, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	srv := httptest.NewServer(g.AdminHandler())
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, n},
		{[]string{"-state", "disabled"}, n / 2},
		{[]string{"-account", "crowd", "-state", "active"}, n - n/2},
	} {
		var out bytes.Buffer
		if err := run(append([]string{"keys", "usage", "-admin", srv.URL, "-json"}, tc.args...), nil, &out, &out); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		var dump struct {
			Keys     []admin.KeyUsage
			Accounts []admin.AccountUsage
		}
		if err := json.Unmarshal(out.Bytes(), &dump); err != nil {
			t.Fatal(err)
		}
		if len(dump.Keys) != tc.want {
			t.Errorf("%v: got %d keys; want %d", tc.args, len(dump.Keys), tc.want)
		}
		for i := 1; i < len(dump.Keys); i++ {
			if dump.Keys[i-1].ID >= dump.Keys[i].ID {
				t.Fatalf("%v: keys out of order or repeated at %d: %s, %s", tc.args, i, dump.Keys[i-1].ID, dump.Keys[i].ID)
			}
		}
		if tc.args == nil && (len(dump.Accounts) != 1 || len(dump.Accounts[0].Keys) != n) {
			t.Errorf("got %d accounts; want crowd with its %d keys", len(dump.Accounts), n)
		}
	}
	var out bytes.Buffer
	if err := run([]string{"keys", "usage", "-admin", srv.URL, "-id", "k00001", "-state", "active"}, nil, &out, &out); err == nil {
		t.Errorf("-id with -state: want an error")
	}
}

func TestDemoPrintsDashboard(t *testing.T) {
	var out bytes.Buffer
	printDemo(&out, "http://127.0.0.1:8080", "http://127.0.0.1:9090", "tg_full", "tg_limited")
	if !strings.Contains(out.String(), "dashboard: http://127.0.0.1:9090/\n") {
		t.Errorf("demo output lacks the dashboard URL:\n%s", out.String())
	}
	out.Reset()
	printDemo(&out, "http://127.0.0.1:8080", "", "tg_full", "tg_limited")
	if strings.Contains(out.String(), "dashboard") {
		t.Errorf("demo output names a dashboard with the admin listener off:\n%s", out.String())
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
