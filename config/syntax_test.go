package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestSyntaxProblemLines: a YAML syntax mistake is reported at the line
// where it is. yaml.v3 alone names the line where the enclosing block
// began ("line 1: did not find expected '-' indicator" for a mistake on
// line 6), and calls a tab "found character that cannot start any token".
func TestSyntaxProblemLines(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []string
	}{
		{"sequence entry key under-indented",
			"keys:\n  - id: a\n    sha256: x\n    plan: full\n  - id: b\n   sha256: y\n    plan: full\n",
			[]string{"line 6: did not find expected '-' indicator"}},
		{"mapping key under-indented",
			"server:\n  listen: x\n  read_timeout: 1s\n write_timeout: 2s\nadmin:\n  listen: y\n",
			[]string{"line 4: did not find expected key"}},
		{"sequence item under-indented",
			"plans:\n  full:\n    endpoints:\n      - list\n      - whatsup\n     - series\n",
			[]string{"line 6: did not find expected key"}},
		{"dash without space",
			"keys:\n  - id: a\n    plan: full\n  -id: b\n",
			[]string{"line 4: did not find expected '-' indicator"}},
		{"unterminated quote keeps its line",
			"server:\n  listen: \"127.0.0.1:8080\nadmin: [\n",
			[]string{"line 2: found unexpected end of stream"}},
		{"tab in indentation",
			"server:\n  listen: x\n\tread_timeout: 1s\n",
			[]string{"line 3: a tab character; YAML indents with spaces"}},
		{"tab as the whole indentation",
			"server:\n\tlisten: x\n",
			[]string{"line 2: a tab character; YAML indents with spaces"}},
		{"two tabbed lines",
			"server:\n\tlisten: x\n\tread_timeout: 1s\n",
			[]string{"line 2: a tab character; YAML indents with spaces", "line 3: a tab character; YAML indents with spaces"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.text), nil)
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("Parse = %v; want a *config.Error", err)
			}
			if !reflect.DeepEqual(cerr.Problems, tc.want) {
				t.Errorf("problems:\ngot  %q\nwant %q", cerr.Problems, tc.want)
			}
		})
	}
}

// TestSecretAsDigestNotEchoed: a key pasted where its digest belongs is
// named as such, and the error never repeats it.
func TestSecretAsDigestNotEchoed(t *testing.T) {
	const secret = "tg_FAKEfakeFAKEfakeFAKEfakeFAKEfakeFAKEfakeFAKEfakeFAKE"
	_, err := Parse([]byte("keys:\n  - id: a\n    sha256: "+secret+"\n    plan: full\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "this is the secret itself, not its digest") {
		t.Fatalf("Parse = %v; want the secret named as such", err)
	}
	if strings.Contains(err.Error(), "FAKEfake") {
		t.Errorf("the error echoes the secret: %v", err)
	}
}
