package limits

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"trendgate/internal/clock"
)

// sfItem is one parsed structured-field list member: a quoted string with
// integer parameters.
type sfItem struct {
	name   string
	params map[string]int64
}

// parseSFList parses the subset of RFC 9651 lists the RateLimit fields use:
// `"name";k=1;k2=2, "other";k=3`. It fails the test on anything else.
func parseSFList(t *testing.T, s string) []sfItem {
	t.Helper()
	var out []sfItem
	for _, member := range strings.Split(s, ",") {
		member = strings.TrimLeft(member, " ")
		parts := strings.Split(member, ";")
		name := parts[0]
		if len(name) < 2 || name[0] != '"' || name[len(name)-1] != '"' {
			t.Fatalf("member %q: want a quoted string", member)
		}
		it := sfItem{name: name[1 : len(name)-1], params: map[string]int64{}}
		for _, kv := range parts[1:] {
			k, v, ok := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if !ok || err != nil || k == "" || k != strings.ToLower(k) || n < 0 {
				t.Fatalf("parameter %q of %q: want key=non-negative integer", kv, member)
			}
			it.params[k] = n
		}
		out = append(out, it)
	}
	return out
}

func TestSetHeaders(t *testing.T) {
	ctx := context.Background()
	// 10:00 UTC on 18 Nov 2026: 14h to midnight, 12d14h to December.
	clk := clock.NewFake(time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC))
	l := newLocal(t, clk, nil)
	p := Policy{PerSecond: 10, Burst: 20, Daily: 1000, Monthly: 5000}
	var d Decision
	for range 3 {
		d, _ = l.Admit(ctx, Subject{Key: "k"}, p, 5) // 15 tokens, 15 units
	}
	h := http.Header{}
	d.SetHeaders(h)

	pol := parseSFList(t, h.Get("RateLimit-Policy"))
	cur := parseSFList(t, h.Get("RateLimit"))
	wantPol := []sfItem{
		{"burst", map[string]int64{"q": 20, "w": 2}},
		{"daily", map[string]int64{"q": 1000, "w": 86400}},
		{"monthly", map[string]int64{"q": 5000, "w": 30 * 86400}},
	}
	wantCur := []sfItem{
		{"burst", map[string]int64{"r": 5, "t": 2}}, // 15 tokens short at 10/s: 1.5s
		{"daily", map[string]int64{"r": 985, "t": 14 * 3600}},
		{"monthly", map[string]int64{"r": 4985, "t": (12*24 + 14) * 3600}},
	}
	for _, c := range []struct {
		field     string
		got, want []sfItem
	}{{"RateLimit-Policy", pol, wantPol}, {"RateLimit", cur, wantCur}} {
		if len(c.got) != len(c.want) {
			t.Fatalf("%s: got %d members; want %d", c.field, len(c.got), len(c.want))
		}
		for i := range c.want {
			if c.got[i].name != c.want[i].name {
				t.Errorf("%s[%d]: got name %q; want %q", c.field, i, c.got[i].name, c.want[i].name)
			}
			for k, v := range c.want[i].params {
				if c.got[i].params[k] != v {
					t.Errorf("%s %s: got %s=%d; want %d", c.field, c.want[i].name, k, c.got[i].params[k], v)
				}
			}
		}
	}
	// Most restrictive: burst has 5/20 left, less than daily 985/1000.
	for field, want := range map[string]string{
		"X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "5", "X-RateLimit-Reset": "2", "Retry-After": "",
	} {
		if got := h.Get(field); got != want {
			t.Errorf("%s: got %q; want %q", field, got, want)
		}
	}

	// A refusal carries Retry-After as well as the same fields.
	d, _ = l.Admit(ctx, Subject{Key: "k"}, p, 10)
	if d.Allowed {
		t.Fatalf("got allowed with 5 tokens left and cost 10")
	}
	h = http.Header{}
	d.SetHeaders(h)
	if got := h.Get("Retry-After"); got != "1" { // 5 tokens at 10/s
		t.Errorf("Retry-After: got %q; want \"1\"", got)
	}
	if got := len(parseSFList(t, h.Get("RateLimit"))); got != 3 {
		t.Errorf("RateLimit on a 429: got %d members; want 3", got)
	}
}

func TestSetHeadersSubsets(t *testing.T) {
	now := time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		p          Policy
		wantNames  string
		wantLimit  string
		wantRemain string
	}{
		{"no limits: no fields", Policy{}, "", "", ""},
		{"daily only", Policy{Daily: 7}, "daily", "7", "6"},
		{"monthly window is this month's length", Policy{Monthly: 100}, "monthly", "100", "99"},
		{"quota more restrictive than burst", Policy{PerSecond: 100, Burst: 100, Daily: 2}, "burst,daily", "2", "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocal(t, clock.NewFake(now), nil)
			d, err := l.Admit(context.Background(), Subject{Key: "k"}, tc.p, 1)
			if err != nil || !d.Allowed {
				t.Fatalf("Admit: %+v %v", d, err)
			}
			h := http.Header{}
			d.SetHeaders(h)
			var names []string
			if v := h.Get("RateLimit-Policy"); v != "" {
				for _, it := range parseSFList(t, v) {
					names = append(names, it.name)
					if it.name == "monthly" && it.params["w"] != 28*86400 {
						t.Errorf("monthly w: got %d; want %d (February 2026)", it.params["w"], 28*86400)
					}
				}
			}
			if got := strings.Join(names, ","); got != tc.wantNames {
				t.Errorf("policies: got %q; want %q", got, tc.wantNames)
			}
			if got := h.Get("X-RateLimit-Limit"); got != tc.wantLimit {
				t.Errorf("X-RateLimit-Limit: got %q; want %q", got, tc.wantLimit)
			}
			if got := h.Get("X-RateLimit-Remaining"); got != tc.wantRemain {
				t.Errorf("X-RateLimit-Remaining: got %q; want %q", got, tc.wantRemain)
			}
		})
	}
}

func TestUnservable(t *testing.T) {
	tests := []struct {
		name  string
		p     Policy
		cost  int
		limit string
		most  int64
	}{
		{"fits", Policy{PerSecond: 1, Burst: 5, Daily: 5, Monthly: 5}, 5, "", 0},
		{"burst", Policy{PerSecond: 1, Burst: 3}, 5, "burst", 3},
		{"default burst is ceil(per_second)", Policy{PerSecond: 2.5}, 4, "burst", 3},
		{"no rate limit, no burst check", Policy{Burst: 1}, 5, "", 0},
		{"daily", Policy{Daily: 4, Monthly: 100}, 5, "daily", 4},
		{"monthly", Policy{Monthly: 2}, 5, "monthly", 2},
		{"nothing limited", Policy{}, 1000, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			limit, most := tc.p.Unservable(tc.cost)
			if limit != tc.limit || most != tc.most {
				t.Errorf("Unservable(%d) = %q, %d; want %q, %d", tc.cost, limit, most, tc.limit, tc.most)
			}
		})
	}
}

func TestSetPolicyHeader(t *testing.T) {
	now := time.Date(2026, 2, 10, 12, 0, 0, 0, time.UTC) // February: 28 days
	h := http.Header{}
	SetPolicyHeader(h, Policy{PerSecond: 5, Burst: 10, Daily: 5000, Monthly: 100000}, now)
	if got, want := h.Get("RateLimit-Policy"), `"burst";q=10;w=2, "daily";q=5000;w=86400, "monthly";q=100000;w=2419200`; got != want {
		t.Errorf("RateLimit-Policy = %q; want %q", got, want)
	}
	if h.Get("RateLimit") != "" || h.Get("Retry-After") != "" {
		t.Errorf("SetPolicyHeader wrote more than the policy: %v", h)
	}
	h = http.Header{}
	SetPolicyHeader(h, Policy{}, now)
	if len(h) != 0 {
		t.Errorf("zero policy wrote %v; want nothing", h)
	}
}
