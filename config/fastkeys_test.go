package config

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
)

// decodeYAMLOnly decodes data as decodeStrict did before fastKeys: with
// yaml.v3 alone.
func decodeYAMLOnly(data []byte) (*Config, error) {
	cfg := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return cfg, nil
}

// checkFastKeys fails t when fastKeys takes data and decodes it other than
// yaml.v3 does.
func checkFastKeys(t *testing.T, data []byte) (took bool) {
	t.Helper()
	rest, keys, ok := fastKeys(data)
	if !ok {
		if !bytes.Equal(rest, data) {
			t.Fatal("fastKeys changed data it did not take")
		}
		return false
	}
	if bytes.Count(rest, []byte{'\n'}) != bytes.Count(data, []byte{'\n'}) {
		t.Fatal("fastKeys changed the number of lines")
	}
	want, werr := decodeYAMLOnly(data)
	got, gerr := decodeYAMLOnly(rest)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("yaml.v3 on the whole: %v; on the rest: %v", werr, gerr)
	}
	if werr != nil {
		return true
	}
	if !slices.EqualFunc(keys, want.Keys, Key.Equal) {
		t.Fatalf("fastKeys read\n%+v\nyaml.v3 reads\n%+v", keys, want.Keys)
	}
	got.Keys, want.Keys = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the rest decodes to other settings than the whole")
	}
	return true
}

func TestFastKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		take bool
	}{
		{"plain", "keys:\n  - id: acme-web\n    sha256: \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\n    account: acme\n", true},
		{"every field", "admin:\n  listen: 127.0.0.1:9999\nkeys:\n    - id: k1 # the first\n      sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n      account: \"\"\n      plan: full\n      expires: 2026-12-01T00:00:00Z\n      not_before: 2026-01-01T10:00:00+02:00\n      created: null\n      disabled: true\n      per_second: 2.5\n      burst: 7\n      daily: 100\n      monthly: ~\n\n    # between keys\n    - id: 'k2'\n      plan: limited\nplans:\n  full:\n    per_second: 3\n", true},
		{"keys last, no end of line", "keys:\n- id: k\n  plan: full", false},
		{"sequence at column 0", "keys:\n- id: k\n  plan: full\n", false},
		{"flow sequence", "keys: [{id: k, plan: full}]\n", false},
		{"unknown field", "keys:\n  - id: k\n    plan: full\n    color: red\n", false},
		{"a field twice", "keys:\n  - id: k\n    id: j\n", false},
		{"an escape", "keys:\n  - id: \"k\\u0041\"\n", false},
		{"an anchor", "keys:\n  - id: &a k\n", false},
		{"a number as an id", "keys:\n  - id: 123\n", false},
		{"a boolean as a plan", "keys:\n  - id: k\n    plan: yes\n", false},
		{"an octal-looking number", "keys:\n  - id: k\n    burst: 010\n", false},
		{"a date without time", "keys:\n  - id: k\n    expires: 2026-12-01\n", false},
		{"keys twice", "keys:\n  - id: k\nkeys:\n  - id: j\n", false},
		{"two documents", "keys:\n  - id: k\n---\nkeys: []\n", false},
		{"keys null", "keys:\nplans: {}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if took := checkFastKeys(t, []byte(tc.yaml)); took != tc.take {
				t.Fatalf("fastKeys took it: %v; want %v", took, tc.take)
			}
		})
	}
}

// FuzzFastKeys holds fastKeys's reading equal to yaml.v3's wherever it
// takes a document.
func FuzzFastKeys(f *testing.F) {
	// The forms an operator, trendgate's tools and yaml.Marshal write.
	f.Add([]byte("keys:\n  - id: acme-web\n    sha256: \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\n    account: acme\n"))
	f.Add([]byte("keys:\n    - id: k000001\n      sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n      account: \"\"\n      plan: full\n      expires: null\n      disabled: false\n      per_second: null\n"))
	// Values at the edge of what YAML reads as a string.
	f.Add([]byte("keys:\n  - id: k\n    plan: no\n    daily: -0\n    per_second: 1.50\n    expires: 2026-12-01T00:00:00.5-07:00\n"))
	// A block followed by another section and comments.
	f.Add([]byte("# head\nkeys:\n  # inside\n  - id: a\n\n  - id: b\n# after\nlimits:\n  max_keys: 5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastKeys(t, data)
	})
}
