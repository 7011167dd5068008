package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"trendgate/admin"
	"trendgate/api"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/internal/clock"
	"trendgate/rollup"
)

// historyWorld is a gateway with two accounts (acme: keys acme-1 and
// acme-2; solo: a key of its own) on the demo upstream, its state file in
// a temporary directory, and its admin routes served.
type historyWorld struct {
	t       *testing.T
	clk     *clock.Fake
	g       *gateway.Gateway
	admin   string
	secrets map[string]string // key id → secret
}

func newHistoryWorld(t *testing.T, start time.Time) *historyWorld {
	t.Helper()
	w := &historyWorld{t: t, clk: clock.NewFake(start), secrets: map[string]string{}}
	up, err := demo.New(demo.Options{Clock: w.clk, UnknownTopic404: true})
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); upSrv.Close() })
	cfg := config.Default()
	cfg.Upstream.BaseURL = upSrv.URL
	cfg.State.Path = filepath.Join(t.TempDir(), "state")
	acmeDaily, soloDaily := int64(1000), int64(500)
	cfg.Accounts = []config.Account{{ID: "acme", Plan: "full", Daily: &acmeDaily}}
	for _, id := range []string{"acme-1", "acme-2", "solo"} {
		w.secrets[id] = newSecret(t)
		k := config.Key{ID: id, SHA256: auth.Digest(w.secrets[id]), Account: "acme"}
		if id == "solo" {
			k.Account, k.Plan, k.Daily = "", "full", &soloDaily
		}
		cfg.Keys = append(cfg.Keys, k)
	}
	w.g, err = gateway.New(cfg, gateway.Options{Clock: w.clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.g.Close() })
	srv := httptest.NewServer(w.g.AdminHandler())
	t.Cleanup(srv.Close)
	w.admin = srv.URL
	return w
}

// send makes one public request with key id's secret and returns its status.
func (w *historyWorld) send(id, path string) (int, []byte) {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Header.Set("Authorization", "Bearer "+w.secrets[id])
	rec := httptest.NewRecorder()
	w.g.ServeHTTP(rec, r)
	return rec.Code, rec.Body.Bytes()
}

// adminGet reads path from the admin listener with accept.
func (w *historyWorld) adminGet(path, accept string) (int, []byte) {
	w.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, w.admin+path, nil)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// dailyUsed is the account's daily quota counter as GET /keys/{id} shows it.
func (w *historyWorld) dailyUsed(keyID string) int64 {
	w.t.Helper()
	code, b := w.adminGet("/keys/"+keyID, "application/json")
	var k admin.KeyUsage
	if err := json.Unmarshal(b, &k); code != 200 || err != nil {
		w.t.Fatalf("GET /keys/%s: %d %s", keyID, code, b)
	}
	return k.Daily.Used
}

// TestUsageHistoryAgrees is issue 44's check: after traffic from two
// accounts over five simulated days, the admin API's JSON and CSV, the
// client's own usage and `trendgate usage report` agree with each other and
// with the units the daily quota counters charged; the month closes
// unchanged.
func TestUsageHistoryAgrees(t *testing.T) {
	w := newHistoryWorld(t, time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC))
	charged := map[string]map[string]int64{"acme": {}, "solo": {}} // account → date → units
	for day := range 5 {
		w.clk.Set(time.Date(2026, 11, 26+day, 9, 0, 0, 0, time.UTC))
		date := w.clk.Now().Format(time.DateOnly)
		topics := []string{"youtube", "bitcoin", "ethereum", "xrp", "solana", "dogecoin", "cardano"}
		for i := range day + 2 {
			if code, b := w.send("acme-1", "/api4/public/topic/"+topics[i]+"/whatsup/v1"); code != 200 {
				t.Fatalf("acme-1: %d %s", code, b)
			}
		}
		if code, _ := w.send("acme-2", "/api4/public/topics/list/v1"); code != 200 {
			t.Fatalf("acme-2: %d", code)
		}
		if code, _ := w.send("solo", "/api4/public/topics/list/v1"); code != 200 {
			t.Fatalf("solo: %d", code)
		}
		// Refused by the upstream after admission: its unit is refunded.
		if code, _ := w.send("solo", "/api4/public/topic/nosuchtopic/whatsup/v1"); code/100 != 4 {
			t.Fatalf("solo's unknown topic: %d, want a 4xx", code)
		}
		charged["acme"][date] = w.dailyUsed("acme-1")
		charged["solo"][date] = w.dailyUsed("solo")
		if charged["acme"][date] == 0 || charged["solo"][date] == 0 {
			t.Fatalf("%s: nothing charged (%v)", date, charged)
		}
	}
	w.clk.Set(time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC))

	// The admin API's JSON, per account.
	for account, days := range charged {
		code, b := w.adminGet("/accounts/"+account+"/usage?from=2026-11-01&to=2026-11-30", "application/json")
		var h admin.UsageHistory
		if err := json.Unmarshal(b, &h); code != 200 || err != nil || len(h.Series) != 1 {
			t.Fatalf("%s: %d %s", account, code, b)
		}
		got := map[string]int64{}
		for _, d := range h.Series[0].Days {
			got[d.Date.String()] = d.Units
		}
		if !reflect.DeepEqual(got, days) {
			t.Errorf("%s: JSON units by day %v, quota counters charged %v", account, got, days)
		}
	}
	// solo's 400s are counted by class, and not charged.
	_, b := w.adminGet("/keys/solo/usage?from=2026-11-26&to=2026-11-26", "application/json")
	var solo admin.UsageHistory
	_ = json.Unmarshal(b, &solo)
	if len(solo.Series) != 1 || solo.Series[0].Key != "solo" {
		t.Fatalf("GET /keys/solo/usage: %s", b)
	}
	var by4xx int64
	for _, c := range solo.Series[0].Total.Endpoints {
		if c.Class == rollup.Class4xx {
			by4xx += c.Requests
		}
	}
	if by4xx != 1 || solo.Series[0].Total.Requests != 2 {
		t.Errorf("solo on 11-26: %d 4xx of %d requests, want 1 of 2", by4xx, solo.Series[0].Total.Requests)
	}

	// The CSV export and the report's CSV are the same bytes, and agree.
	code, csvBody := w.adminGet("/usage?from=2026-11-01&to=2026-11-30", "text/csv")
	if code != 200 {
		t.Fatalf("CSV: %d %s", code, csvBody)
	}
	rows, err := csv.NewReader(bytes.NewReader(csvBody)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	fromCSV := map[string]map[string]int64{"acme": {}, "solo": {}}
	for _, r := range rows[1:] {
		n, _ := strconv.ParseInt(r[3], 10, 64)
		fromCSV[r[1]][r[0]] = n
	}
	if !reflect.DeepEqual(fromCSV, charged) {
		t.Errorf("CSV units %v, quota counters charged %v", fromCSV, charged)
	}
	// GET /usage pages by account: limit=1 answers acme, then solo after
	// its cursor, and the two pages are the whole answer.
	var p1, p2 admin.UsageHistory
	if code, b := w.adminGet("/usage?from=2026-11-01&to=2026-11-30&limit=1", "application/json"); code != 200 || json.Unmarshal(b, &p1) != nil {
		t.Fatalf("page 1: %d %s", code, b)
	}
	if len(p1.Series) != 1 || p1.Series[0].Account != "acme" || p1.NextCursor == nil {
		t.Fatalf("page 1 = %+v; want acme and a next cursor", p1)
	}
	if code, b := w.adminGet("/usage?from=2026-11-01&to=2026-11-30&limit=1&cursor="+*p1.NextCursor, "application/json"); code != 200 || json.Unmarshal(b, &p2) != nil {
		t.Fatalf("page 2: %d %s", code, b)
	}
	if len(p2.Series) != 1 || p2.Series[0].Account != "solo" || p2.NextCursor != nil {
		t.Fatalf("page 2 = %+v; want solo and no next cursor", p2)
	}
	var out bytes.Buffer
	if err := run([]string{"usage", "report", "-month", "2026-11", "-admin", w.admin, "-csv"}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if out.String() != string(csvBody) {
		t.Errorf("usage report -csv:\n%s\nadmin CSV:\n%s", out.String(), csvBody)
	}
	// The table's totals.
	out.Reset()
	if err := run([]string{"usage", "report", "-month", "2026-11", "-admin", w.admin, "-account", "acme"}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var acmeTotal int64
	for _, u := range charged["acme"] {
		acmeTotal += u
	}
	if !strings.Contains(out.String(), "account acme") || !containsRow(out.String(), "total", acmeTotal) || strings.Contains(out.String(), "solo") {
		t.Errorf("usage report -account acme, want a total of %d units:\n%s", acmeTotal, out.String())
	}

	// The client's own usage: its account's days, nobody else's.
	for id, account := range map[string]string{"acme-2": "acme", "solo": "solo"} {
		code, b := w.send(id, api.UsagePath)
		var u api.Usage
		if err := json.Unmarshal(b, &u); code != 200 || err != nil {
			t.Fatalf("%s usage: %d %s", id, code, b)
		}
		got := map[string]int64{}
		for _, d := range u.History {
			got[d.Date] = d.Units
		}
		if !reflect.DeepEqual(got, charged[account]) {
			t.Errorf("%s's history: %v, want %s's %v", id, got, account, charged[account])
		}
	}

	// Month close: December's traffic, and a late request, leave November as it was.
	before := fmt.Sprint(w.adminGet("/usage?from=2026-11-01&to=2026-11-30", "text/csv"))
	w.clk.Set(time.Date(2026, 12, 1, 0, 0, 5, 0, time.UTC))
	if code, _ := w.send("acme-1", "/api4/public/topics/list/v1"); code != 200 {
		t.Fatalf("December: %d", code)
	}
	if after := fmt.Sprint(w.adminGet("/usage?from=2026-11-01&to=2026-11-30", "text/csv")); after != before {
		t.Errorf("November changed after its close:\nbefore %s\nafter  %s", before, after)
	}
	_, b = w.adminGet("/accounts/acme/usage?from=2026-12-01&to=2026-12-01", "application/json")
	var dec admin.UsageHistory
	_ = json.Unmarshal(b, &dec)
	if len(dec.Series) != 1 || dec.Series[0].Total.Units != w.dailyUsed("acme-1") {
		t.Errorf("December 1: %s, want the units charged (%d)", b, w.dailyUsed("acme-1"))
	}
}

// containsRow reports whether text has a line starting with label whose
// second field is n.
func containsRow(text, label string, n int64) bool {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == label && f[1] == strconv.FormatInt(n, 10) {
			return true
		}
	}
	return false
}

// Bad input gets a JSON error with a stable code and changes nothing.
func TestUsageHistoryBadInput(t *testing.T) {
	w := newHistoryWorld(t, time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		path   string
		status int
		code   string
	}{
		{"/accounts/acme/usage?from=2026-11-1", 400, api.CodeInvalidDate},
		{"/accounts/acme/usage?to=yesterday", 400, api.CodeInvalidDate},
		{"/accounts/acme/usage?from=2026-11-20&to=2026-11-10", 400, api.CodeInvalidRange},
		{"/accounts/acme/usage?from=2025-01-01&to=2026-11-10", 400, api.CodeRangeBeyondRetention},
		{"/accounts/acme/usage?day=2026-11-01", 400, api.CodeInvalidRange},
		{"/accounts/acme/usage?from=2026-11-01&from=2026-11-02", 400, api.CodeInvalidRange},
		{"/accounts/nobody/usage", 404, api.CodeUnknownAccount},
		{"/keys/nobody/usage", 404, api.CodeUnknownKey},
		{"/usage?from=2026-13-01", 400, api.CodeInvalidDate},
		{"/usage?limit=0", 400, api.CodeInvalidParameter},
		{"/usage?cursor=bm90LW91cnM", 400, api.CodeInvalidCursor},
		{"/usage?day=2026-11-01", 400, api.CodeUnknownParameter},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, b := w.adminGet(tc.path, "text/csv")
			var e struct{ Code string }
			if err := json.Unmarshal(b, &e); code != tc.status || err != nil || e.Code != tc.code {
				t.Errorf("got %d %s, want %d %s", code, b, tc.status, tc.code)
			}
		})
	}
	if err := run([]string{"usage", "report", "-month", "2026-1", "-admin", w.admin}, nil, io.Discard, io.Discard); err == nil {
		t.Error("usage report -month 2026-1: no error")
	}
}
