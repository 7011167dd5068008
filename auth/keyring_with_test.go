package auth

import (
	"fmt"
	"strings"
	"testing"
)

// TestKeyringWith changes a keyring one key at a time, past compactAt,
// and checks after each change that it answers as a keyring built whole
// from the same keys does.
func TestKeyringWith(t *testing.T) {
	const n = 50
	keys := make([]string, n+compactAt+200)
	for i := range keys {
		var err error
		if keys[i], err = Generate(); err != nil {
			t.Fatal(err)
		}
	}
	specs := make([]KeySpec, n)
	for i := range specs {
		specs[i] = KeySpec{ID: fmt.Sprintf("k%d", i), Digest: Digest(keys[i]), Plan: "full"}
	}
	k, err := NewKeyring(specs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]KeySpec{}
	for _, s := range specs {
		want[s.ID] = s
	}
	check := func(step int) {
		t.Helper()
		if k.Len() != len(want) {
			t.Fatalf("step %d: Len() = %d; want %d", step, k.Len(), len(want))
		}
		got := k.Specs()
		if len(got) != len(want) {
			t.Fatalf("step %d: Specs() has %d keys; want %d", step, len(got), len(want))
		}
		for _, s := range got {
			if w, ok := want[s.ID]; !ok || w != s {
				t.Fatalf("step %d: Specs() has %+v; want %+v", step, s, w)
			}
		}
	}
	secret := map[string]string{}
	for i := range n {
		secret[fmt.Sprintf("k%d", i)] = keys[i]
	}
	next := n
	for step := 0; step < compactAt+200; step++ {
		switch step % 3 {
		case 0: // add a key
			id := fmt.Sprintf("k%d", next)
			s := KeySpec{ID: id, Digest: Digest(keys[next]), Plan: "limited"}
			secret[id] = keys[next]
			next++
			if k, err = k.With([]KeySpec{s}, nil); err != nil {
				t.Fatalf("step %d: With: %v", step, err)
			}
			want[id] = s
		case 1: // disable a key that is still there
			for id, s := range want {
				s.Disabled = !s.Disabled
				if k, err = k.With([]KeySpec{s}, nil); err != nil {
					t.Fatalf("step %d: With: %v", step, err)
				}
				want[id] = s
				break
			}
		case 2: // take the newest key out
			id := fmt.Sprintf("k%d", next-1)
			if k, err = k.With(nil, []string{id}); err != nil {
				t.Fatalf("step %d: With: %v", step, err)
			}
			delete(want, id)
		}
		check(step)
	}
	for id, key := range secret {
		p, err := k.Authenticate(key, t0)
		w, in := want[id]
		switch {
		case !in && ReasonOf(err) != ReasonUnknown:
			t.Errorf("key %s taken out: got %+v, %v; want reason %q", id, p, err, ReasonUnknown)
		case in && w.Disabled && ReasonOf(err) != ReasonDisabled:
			t.Errorf("key %s disabled: got %v; want reason %q", id, err, ReasonDisabled)
		case in && !w.Disabled && (err != nil || p.KeyID != id || p.Plan != w.Plan):
			t.Errorf("key %s: got %+v, %v; want it authenticated on plan %s", id, p, err, w.Plan)
		}
	}
}

// TestKeyringWithRefuses checks that With refuses what NewKeyring does and
// leaves the keyring it was called on as it was.
func TestKeyringWithRefuses(t *testing.T) {
	k, err := NewKeyring([]KeySpec{{ID: "a", Digest: Digest(fixedKey(1)), Plan: "full"}, {ID: "b", Digest: Digest(fixedKey(2)), Plan: "full"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		put  []KeySpec
		drop []string
		want string
	}{
		{"a digest another key keeps", []KeySpec{{ID: "c", Digest: Digest(fixedKey(1)), Plan: "full"}}, nil, "duplicate digest"},
		{"two keys of one id", []KeySpec{{ID: "c", Digest: Digest(fixedKey(3)), Plan: "full"}, {ID: "c", Digest: Digest(fixedKey(4)), Plan: "full"}}, nil, "duplicate id"},
		{"no plan", []KeySpec{{ID: "c", Digest: Digest(fixedKey(3))}}, nil, "empty plan"},
		{"a bad digest", []KeySpec{{ID: "c", Digest: "x", Plan: "full"}}, nil, "64 lower-case hex"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := k.With(tc.put, tc.drop)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("With: got %v, %v; want an error containing %q", got, err, tc.want)
			}
			if p, err := k.Authenticate(fixedKey(1), t0); err != nil || p.KeyID != "a" {
				t.Errorf("the keyring With was called on changed: %+v, %v", p, err)
			}
		})
	}
	// A digest freed by the same change may be taken by another key.
	k2, err := k.With([]KeySpec{{ID: "c", Digest: Digest(fixedKey(1)), Plan: "limited"}}, []string{"a"})
	if err != nil {
		t.Fatalf("With a digest freed in the same change: %v", err)
	}
	if p, err := k2.Authenticate(fixedKey(1), t0); err != nil || p.KeyID != "c" {
		t.Errorf("Authenticate = %+v, %v; want key c", p, err)
	}
}
