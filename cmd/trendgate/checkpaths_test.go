package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigCheckWritablePaths: config check fails, naming the setting,
// when the directory of state.path or keys_file is missing or is not a
// directory (serve would refuse to start; issue 42: the check passed and
// then serve failed), and passes without a warning about either when both
// can be written.
func TestConfigCheckWritablePaths(t *testing.T) {
	t.Setenv("TRENDGATE_UPSTREAM_KEY", "test-upstream-key")
	example, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name            string
		state, keysFile string
		want            []string // in the error; none: the check passes
	}{
		{"both writable", filepath.Join(dir, "state.json"), filepath.Join(dir, "keys.json"), nil},
		{"state directory missing", filepath.Join(dir, "missing", "state.json"), "",
			[]string{"state.path: the directory " + filepath.Join(dir, "missing") + " of " + filepath.Join(dir, "missing", "state.json") + " does not exist"}},
		{"keys_file directory missing", "", filepath.Join(dir, "gone", "keys.json"),
			[]string{"keys_file: the directory " + filepath.Join(dir, "gone") + " of "}},
		{"both wrong", filepath.Join(file, "state.json"), filepath.Join(dir, "gone", "keys.json"),
			[]string{"state.path: " + file + " (the directory of " + filepath.Join(file, "state.json") + ") is not a directory", "keys_file: the directory"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Replace(string(example), "  path: \"\"\n", "  path: \""+tc.state+"\"\n", 1)
			body = strings.Replace(body, "keys_file: \"\"\n", "keys_file: \""+tc.keysFile+"\"\n", 1)
			cfgFile := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(cfgFile, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := run([]string{"config", "check", cfgFile}, nil, &out, &out)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("got %v; want the check to pass\n%s", err, out.String())
				}
			} else if err == nil {
				t.Fatalf("the check passed; want an error saying %q\n%s", tc.want, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q; want it to say %q", err, w)
				}
			}
			// A path that is set is an error or fine, never a warning.
			for _, set := range []struct{ path, warning string }{{tc.state, "warning: state.path:"}, {tc.keysFile, "warning: keys_file:"}} {
				if set.path != "" && strings.Contains(out.String(), set.warning) {
					t.Errorf("output has %q\n%s", set.warning, out.String())
				}
			}
		})
	}
}
