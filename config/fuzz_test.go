package config

import (
	"errors"
	"os"
	"testing"
)

// FuzzParse checks that Parse never panics and always returns either a
// valid configuration or an *Error, never both.
func FuzzParse(f *testing.F) {
	// The documented example, as operators start from it.
	if data, err := os.ReadFile("../config.example.yaml"); err == nil {
		f.Add(data)
	}
	// Empty input: all defaults.
	f.Add([]byte(""))
	// A minimal valid file with a key.
	f.Add([]byte("keys:\n  - id: a\n    sha256: \"" + "1111111111111111111111111111111111111111111111111111111111111111" + "\"\n    plan: full\n"))
	// Env expansion: set, unset, literal, unterminated.
	f.Add([]byte("upstream:\n  api_key: ${TRENDGATE_UPSTREAM_KEY}\nadmin:\n  token: $${x} ${NOPE} ${"))
	// A plan replacing a built-in, with limited fields.
	f.Add([]byte("plans:\n  limited:\n    endpoints: [list]\n    data_mode: limited\n    fields: {list: [topic]}\n"))
	// Wrong types and shapes: scalar root, list root, null maps.
	f.Add([]byte("just a string"))
	f.Add([]byte("- 1\n- 2\n"))
	f.Add([]byte("plans: ~\nserver: ~\nkeys: [~]\n"))
	// Anchors and aliases (a merge key into a plan).
	f.Add([]byte("x: &a {per_second: 1}\nplans:\n  p:\n    <<: *a\n"))
	// Special floats and huge numbers.
	f.Add([]byte("redis:\n  local_share: .nan\nserver:\n  max_header_bytes: 99999999999999999999\n"))
	// Two documents.
	f.Add([]byte("a: 1\n---\nb: 2\n"))
	// Unknown settings (typos, a setting in the wrong section, inside a map
	// and a list) and wrong types, which describe names by YAML path.
	f.Add([]byte("server:\n  listn: x\n  token: y\nplans:\n  p:\n    per_secnd: 1\nkeys:\n  - planet: full\ncache: {ttl: {list: 5 parsecs}}\n"))
	// Credentials whose variable is set but empty (TG_TEST_EMPTY).
	f.Add([]byte("upstream:\n  api_key: ${TG_TEST_EMPTY}\nredis:\n  url: \"redis://:${TG_TEST_EMPTY}@h:1/0\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, testEnv)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Parse returned a config and the error %v", err)
			}
			var cerr *Error
			if !errors.As(err, &cerr) || len(cerr.Problems) == 0 {
				t.Fatalf("Parse error %v (%T) is not an *Error with problems", err, err)
			}
			return
		}
		if cfg == nil {
			t.Fatalf("Parse returned neither a config nor an error")
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that fails Validate: %v", err)
		}
		_ = cfg.ResolvedKeys()
	})
}
