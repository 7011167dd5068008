package auth

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"trendgate/internal/clock"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestNewKeyringErrors(t *testing.T) {
	d1, d2 := Digest(fixedKey(1)), Digest(fixedKey(2))
	tests := []struct {
		name  string
		specs []KeySpec
		want  []string // substrings the error must contain; nil means no error
	}{
		{"nil specs", nil, nil},
		{"one key", []KeySpec{{ID: "a", Digest: d1, Plan: "full"}}, nil},
		{"two keys", []KeySpec{{ID: "a", Digest: d1, Plan: "full"}, {ID: "b", Digest: d2, Plan: "limited"}}, nil},
		{"empty id", []KeySpec{{Digest: d1, Plan: "full"}}, []string{"key 0", "empty id"}},
		{"duplicate id", []KeySpec{{ID: "a", Digest: d1, Plan: "full"}, {ID: "a", Digest: d2, Plan: "full"}}, []string{"key 1", "duplicate id (also key 0)"}},
		{"empty plan", []KeySpec{{ID: "a", Digest: d1}}, []string{"empty plan"}},
		{"empty digest", []KeySpec{{ID: "a", Plan: "full"}}, []string{"64 lower-case hex"}},
		{"upper-case digest", []KeySpec{{ID: "a", Digest: strings.ToUpper(d1), Plan: "full"}}, []string{"64 lower-case hex"}},
		{"short digest", []KeySpec{{ID: "a", Digest: d1[:63], Plan: "full"}}, []string{"64 lower-case hex"}},
		{"long digest", []KeySpec{{ID: "a", Digest: d1 + "0", Plan: "full"}}, []string{"64 lower-case hex"}},
		{"non-hex digest", []KeySpec{{ID: "a", Digest: "g" + d1[1:], Plan: "full"}}, []string{"64 lower-case hex"}},
		{"key instead of digest", []KeySpec{{ID: "a", Digest: fixedKey(1), Plan: "full"}}, []string{"64 lower-case hex"}},
		{"duplicate digest", []KeySpec{{ID: "a", Digest: d1, Plan: "full"}, {ID: "b", Digest: d1, Plan: "full"}}, []string{`key 1 (id "b")`, "duplicate digest (also key 0)"}},
		{"every problem reported", []KeySpec{{ID: "", Digest: d1, Plan: "full"}, {ID: "b", Digest: "x", Plan: ""}}, []string{"empty id", "64 lower-case hex", "empty plan"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := NewKeyring(tc.specs)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("NewKeyring: got error %v; want nil", err)
				}
				if k.Len() != len(tc.specs) {
					t.Errorf("Len() = %d; want %d", k.Len(), len(tc.specs))
				}
				return
			}
			if err == nil {
				t.Fatalf("NewKeyring: got nil error; want one containing %q", tc.want)
			}
			if k != nil {
				t.Errorf("NewKeyring: got a keyring with an error; want nil")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewKeyring error %q; want it to contain %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "auth: ") {
				t.Errorf("NewKeyring error %q; want prefix %q", err, "auth: ")
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	full, limited, gone, off, later := fixedKey(10), fixedKey(11), fixedKey(12), fixedKey(13), fixedKey(14)
	k, err := NewKeyring([]KeySpec{
		{ID: "team-a", Digest: Digest(full), Plan: "full"},
		{ID: "team-b", Digest: Digest(limited), Account: "acme", Plan: "limited"},
		{ID: "old", Digest: Digest(gone), Plan: "full", Expires: t0},
		{ID: "off", Digest: Digest(off), Plan: "full", Disabled: true},
		{ID: "off-and-old", Digest: Digest(later), Plan: "full", Expires: t0, Disabled: true},
		{ID: "next", Digest: Digest(fixedKey(98)), Plan: "full", NotBefore: t0},
		// Digests of malformed variants: present only to prove that a
		// malformed token is refused before any lookup.
		{ID: "upper", Digest: Digest(strings.ToUpper(full)), Plan: "full"},
		{ID: "TG", Digest: Digest("TG_" + full[3:]), Plan: "full"},
		{ID: "bad-sum", Digest: Digest(flipChecksumDigit(full)), Plan: "full"},
	})
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	unknown := fixedKey(99)
	tests := []struct {
		name   string
		token  string
		now    time.Time
		want   Principal
		reason Reason // "" means accepted
	}{
		{"full key", full, t0, Principal{KeyID: "team-a", Account: "team-a", Plan: "full"}, ""},
		{"limited key", limited, t0, Principal{KeyID: "team-b", Account: "acme", Plan: "limited"}, ""},
		{"before expiry", gone, t0.Add(-time.Nanosecond), Principal{KeyID: "old", Account: "old", Plan: "full"}, ""},
		// A refused known key still names itself, for the operator's log.
		{"at expiry", gone, t0, Principal{KeyID: "old", Account: "old", Plan: "full"}, ReasonExpired},
		{"after expiry", gone, t0.Add(time.Hour), Principal{KeyID: "old", Account: "old", Plan: "full"}, ReasonExpired},
		{"disabled", off, t0, Principal{KeyID: "off", Account: "off", Plan: "full"}, ReasonDisabled},
		{"disabled wins over expired", later, t0.Add(time.Hour), Principal{KeyID: "off-and-old", Account: "off-and-old", Plan: "full"}, ReasonDisabled},
		{"before not_before", fixedKey(98), t0.Add(-time.Nanosecond), Principal{KeyID: "next", Account: "next", Plan: "full"}, ReasonNotYetValid},
		{"at not_before", fixedKey(98), t0, Principal{KeyID: "next", Account: "next", Plan: "full"}, ""},
		{"unknown", unknown, t0, Principal{}, ReasonUnknown},
		{"bad checksum", flipChecksumDigit(full), t0, Principal{}, ReasonChecksum},
		{"upper-cased key", strings.ToUpper(full), t0, Principal{}, ReasonMalformed},
		{"TG_ prefix", "TG_" + full[3:], t0, Principal{}, ReasonMalformed},
		{"lower-cased key", "tg_" + strings.ToLower(full[3:]), t0, Principal{}, ReasonChecksum},
		{"empty", "", t0, Principal{}, ReasonMalformed},
		{"digest instead of key", Digest(full), t0, Principal{}, ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := k.Authenticate(tc.token, tc.now)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("Authenticate: got error %v; want nil", err)
				}
			} else {
				if !errors.Is(err, ErrInvalidKey) {
					t.Fatalf("Authenticate: got error %v; want ErrInvalidKey", err)
				}
				if r := ReasonOf(err); r != tc.reason {
					t.Errorf("ReasonOf: got %q; want %q", r, tc.reason)
				}
				if len(tc.token) > 3 && strings.Contains(err.Error(), tc.token[3:]) {
					t.Errorf("error %q contains the token", err)
				}
			}
			if got != tc.want {
				t.Errorf("Authenticate = %+v; want %+v", got, tc.want)
			}
		})
	}
}

// TestAuthenticateExpiryWithClock drives expiry with a fake clock, the way
// the gateway calls Authenticate(token, clk.Now()).
func TestAuthenticateExpiryWithClock(t *testing.T) {
	key := fixedKey(20)
	clk := clock.NewFake(t0)
	k, err := NewKeyring([]KeySpec{{ID: "trial", Digest: Digest(key), Plan: "limited", Expires: t0.Add(24 * time.Hour)}})
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	steps := []struct {
		advance time.Duration
		reason  Reason
	}{
		{0, ""},
		{24*time.Hour - time.Second, ""},
		{time.Second, ReasonExpired},
		{time.Hour, ReasonExpired},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		_, err := k.Authenticate(key, clk.Now())
		if got := ReasonOf(err); got != s.reason || (s.reason == "" && err != nil) {
			t.Errorf("step %d at %v: got error %v (reason %q); want reason %q", i, clk.Now(), err, got, s.reason)
		}
	}
}

// TestAuthenticateSpanAgrees: the span AuthenticateSpan gives an accepted
// key contains exactly the instants at which Authenticate accepts it, for
// keys with and without bounds; a refused key gets no span.
func TestAuthenticateSpanAgrees(t *testing.T) {
	specs := []KeySpec{
		{ID: "open", Digest: Digest(fixedKey(30)), Plan: "full"},
		{ID: "trial", Digest: Digest(fixedKey(31)), Plan: "full", Expires: t0.Add(time.Hour)},
		{ID: "later", Digest: Digest(fixedKey(32)), Plan: "full", NotBefore: t0.Add(-time.Hour)},
		{ID: "window", Digest: Digest(fixedKey(33)), Plan: "full", NotBefore: t0.Add(-time.Hour), Expires: t0.Add(time.Hour)},
		{ID: "off", Digest: Digest(fixedKey(34)), Plan: "full", Disabled: true},
	}
	k, err := NewKeyring(specs)
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	at := []time.Time{t0.Add(-2 * time.Hour), t0.Add(-time.Hour - time.Nanosecond), t0.Add(-time.Hour), t0,
		t0.Add(time.Hour - time.Nanosecond), t0.Add(time.Hour), t0.Add(2 * time.Hour)}
	for i, spec := range specs {
		key := fixedKey(byte(30 + i))
		for _, now := range at {
			p, span, err := k.AuthenticateSpan(key, now)
			if err != nil {
				if span != (Span{}) {
					t.Errorf("%s at %v: refused (%v) with span %+v; want none", spec.ID, now, err, span)
				}
				continue
			}
			if p.KeyID != spec.ID {
				t.Errorf("%s at %v: got principal %+v", spec.ID, now, p)
			}
			for _, later := range at {
				_, aerr := k.Authenticate(key, later)
				if span.Contains(later) != (aerr == nil) {
					t.Errorf("%s: span %+v contains %v: %v; Authenticate there: %v", spec.ID, span, later, span.Contains(later), aerr)
				}
			}
		}
	}
}

func TestEmptyKeyringsRefuse(t *testing.T) {
	key := fixedKey(21)
	empty, err := NewKeyring(nil)
	if err != nil {
		t.Fatalf("NewKeyring(nil): %v", err)
	}
	tests := []struct {
		name string
		k    *Keyring
	}{
		{"nil", nil},
		{"zero value", &Keyring{}},
		{"no specs", empty},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if n := tc.k.Len(); n != 0 {
				t.Errorf("Len() = %d; want 0", n)
			}
			p, err := tc.k.Authenticate(key, t0)
			if ReasonOf(err) != ReasonUnknown {
				t.Errorf("Authenticate: got (%+v, %v); want reason %q", p, err, ReasonUnknown)
			}
			if _, err := tc.k.Authenticate("junk", t0); ReasonOf(err) != ReasonMalformed {
				t.Errorf("Authenticate(junk): got %v; want reason %q", err, ReasonMalformed)
			}
		})
	}
}

// TestAuthenticateDigestPrefixCollision exercises the constant-time compare:
// several stored digests share the presented digest's first 8 bytes (the
// map bucket), so only the full compare can tell them apart.
func TestAuthenticateDigestPrefixCollision(t *testing.T) {
	key := fixedKey(30)
	real := Digest(key)
	// near(i) keeps the first 16 hex characters (8 bytes) of real and
	// changes the last one.
	near := func(c byte) string { return real[:63] + string(c) }
	var decoys []KeySpec
	for _, c := range "0123456789abcdef" {
		if byte(c) != real[63] {
			decoys = append(decoys, KeySpec{ID: "decoy-" + string(c), Digest: near(byte(c)), Plan: "full"})
		}
	}
	t.Run("only decoys", func(t *testing.T) {
		k, err := NewKeyring(decoys)
		if err != nil {
			t.Fatalf("NewKeyring: %v", err)
		}
		if n := len(k.base.byPrefix); n != 1 {
			t.Fatalf("decoys fall in %d buckets; want 1", n)
		}
		if _, err := k.Authenticate(key, t0); ReasonOf(err) != ReasonUnknown {
			t.Errorf("Authenticate: got %v; want reason %q", err, ReasonUnknown)
		}
	})
	for _, pos := range []int{0, len(decoys) / 2, len(decoys)} {
		t.Run(fmt.Sprintf("real key at %d", pos), func(t *testing.T) {
			specs := append(append(append([]KeySpec{}, decoys[:pos]...), KeySpec{ID: "real", Digest: real, Plan: "limited"}), decoys[pos:]...)
			k, err := NewKeyring(specs)
			if err != nil {
				t.Fatalf("NewKeyring: %v", err)
			}
			got, err := k.Authenticate(key, t0)
			if err != nil {
				t.Fatalf("Authenticate: got error %v; want nil", err)
			}
			if want := (Principal{KeyID: "real", Account: "real", Plan: "limited"}); got != want {
				t.Errorf("Authenticate = %+v; want %+v", got, want)
			}
		})
	}
}

func TestAuthenticateConcurrent(t *testing.T) {
	const keys, workers, rounds = 50, 8, 200
	tokens := make([]string, keys)
	specs := make([]KeySpec, keys)
	for i := range tokens {
		tokens[i] = fixedKey(byte(100 + i))
		specs[i] = KeySpec{ID: fmt.Sprintf("k%d", i), Digest: Digest(tokens[i]), Plan: "full"}
	}
	k, err := NewKeyring(specs)
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				i := (w*rounds + r) % keys
				p, err := k.Authenticate(tokens[i], t0)
				if err != nil || p.KeyID != specs[i].ID {
					errs <- fmt.Errorf("token %d: got (%+v, %v); want key id %s", i, p, err, specs[i].ID)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestAuthenticateAllocations(t *testing.T) {
	key := fixedKey(40)
	k, err := NewKeyring([]KeySpec{{ID: "a", Digest: Digest(key), Plan: "full"}})
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	unknown, bad := fixedKey(41), flipChecksumDigit(key)
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = k.Authenticate(key, t0)
		_, _ = k.Authenticate(unknown, t0)
		_, _ = k.Authenticate(bad, t0)
	})
	if allocs != 0 {
		t.Errorf("Authenticate allocations per run = %v; want 0", allocs)
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	const n = 10000
	specs := make([]KeySpec, n)
	tokens := make([]string, n)
	for i := range specs {
		var raw [rawLen]byte
		raw[0], raw[1], raw[2] = byte(i), byte(i>>8), 0x5a
		tokens[i] = keyFromRaw(&raw)
		specs[i] = KeySpec{ID: fmt.Sprintf("k%d", i), Digest: Digest(tokens[i]), Plan: "full"}
	}
	k, err := NewKeyring(specs)
	if err != nil {
		b.Fatalf("NewKeyring: %v", err)
	}
	var unknownRaw [rawLen]byte
	unknownRaw[31] = 1
	cases := []struct {
		name  string
		token string
	}{
		{"valid", tokens[n/2]},
		{"unknown", keyFromRaw(&unknownRaw)},
		{"bad_checksum", flipChecksumDigit(tokens[0])},
		{"malformed", "tg_short"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = k.Authenticate(c.token, t0)
			}
		})
	}
}

func BenchmarkParseAuthorization(b *testing.B) {
	h := header("Bearer " + fixedKey(1))
	b.ReportAllocs()
	for b.Loop() {
		_, _ = ParseAuthorization(h)
	}
}
