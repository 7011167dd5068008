package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFileForms: config check and serve take the file as -config
// FILE or as the argument, in either place among the flags. config check
// used to take only the argument, and serve only -config.
func TestConfigFileForms(t *testing.T) {
	t.Setenv("TRENDGATE_UPSTREAM_KEY", "test-upstream-key")
	dir := t.TempDir()
	good := "../../config.example.yaml"
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("log:\n  level: loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open.yaml")
	if err := os.WriteFile(open, []byte("admin:\n  listen: \":9090\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr string // "" means success
	}{
		{"check, open admin listener", []string{"config", "check", open}, "admin.listen: \":9090\" is not a loopback address and admin.token is empty"},
		{"serve, open admin listener", []string{"serve", open}, "admin.listen: \":9090\" is not a loopback address"},
		{"check, argument", []string{"config", "check", good}, ""},
		{"check, -config", []string{"config", "check", "-config", good}, ""},
		{"check, -config=", []string{"config", "check", "-config=" + good}, ""},
		{"check, both agreeing", []string{"config", "check", "-config", good, good}, ""},
		{"check, both differing", []string{"config", "check", "-config", good, bad}, "name different files"},
		{"check, none", []string{"config", "check"}, "a configuration file is required"},
		{"check, two arguments", []string{"config", "check", good, bad}, "one configuration file, got 2 arguments"},
		{"check, -config of a bad file", []string{"config", "check", "-config", bad}, "log.level"},
		// serve stops at the configuration: it is invalid, so nothing is
		// started (the forms are what is tested here).
		{"serve, -config", []string{"serve", "-config", bad}, "log.level"},
		{"serve, argument", []string{"serve", bad}, "log.level"},
		{"serve, argument before a flag", []string{"serve", bad, "-watch", "0"}, "log.level"},
		{"serve, none", []string{"serve", "-watch", "0"}, "serve: a configuration file is required (usage: trendgate serve [-config] FILE)"},
		{"serve, missing file", []string{"serve", filepath.Join(dir, "missing.yaml")}, "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(tc.args, nil, &out, &out)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("run %q: %v; want success", tc.args, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("run %q: %v; want an error with %q", tc.args, err, tc.wantErr)
			}
		})
	}
}

// TestKeysUsageFindsAdminFromConfig: keys usage -config reaches the admin
// listener that file's admin.listen sets up, with its admin.token, and
// -admin takes a bare host:port. Both used to need a URL with a scheme and
// the token in $TRENDGATE_ADMIN_TOKEN.
func TestKeysUsageFindsAdminFromConfig(t *testing.T) {
	base := usageGateway(t, "admin-secret") // http://127.0.0.1:PORT
	hostPort := strings.TrimPrefix(base, "http://")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withToken := write("token.yaml", "admin:\n  listen: "+hostPort+"\n  token: admin-secret\n")
	fromEnv := write("env.yaml", "admin:\n  listen: "+hostPort+"\n  token: ${TG_TEST_ADMIN_TOKEN}\n")
	noToken := write("none.yaml", "admin:\n  listen: "+hostPort+"\n")
	elsewhere := write("elsewhere.yaml", "admin:\n  listen: "+closedAddr(t)+"\n  token: admin-secret\n")
	t.Setenv("TG_TEST_ADMIN_TOKEN", "admin-secret")

	tests := []struct {
		name    string
		env     string // $TRENDGATE_ADMIN_TOKEN
		args    []string
		wantErr string
	}{
		{"config with the token", "", []string{"-config", withToken}, ""},
		{"config token from its environment", "", []string{"-config", fromEnv}, ""},
		{"config without a token, token from env", "admin-secret", []string{"-config", noToken}, ""},
		{"config without a token", "", []string{"-config", noToken}, "401 invalid_admin_token"},
		{"-admin wins over the file's address", "", []string{"-config", elsewhere, "-admin", hostPort}, ""},
		{"bare host:port", "admin-secret", []string{"-admin", hostPort}, ""},
		{"bad address", "admin-secret", []string{"-admin", "ftp://" + hostPort}, "is not an admin address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(adminTokenEnv, tc.env)
			var out bytes.Buffer
			err := run(append([]string{"keys", "usage"}, tc.args...), nil, &out, &out)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("keys usage %q: %v; want success", tc.args, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("keys usage %q: %v; want an error with %q", tc.args, err, tc.wantErr)
			case tc.wantErr == "" && !strings.Contains(out.String(), "team-a"):
				t.Errorf("keys usage %q printed no team-a:\n%s", tc.args, out.String())
			}
		})
	}
}

// TestDemoAdminLoopbackOnly: demo mode has no admin token, so its admin
// listener stays on loopback; another address is refused before anything
// starts, with a message a demo user can act on.
func TestDemoAdminLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9090", ":9090", "192.0.2.1:9090"} {
		var out bytes.Buffer
		err := run([]string{"-admin", addr}, nil, &out, &out)
		if err == nil || !strings.Contains(err.Error(), "demo mode serves the admin listener without a token") {
			t.Errorf("-admin %s: %v; want it refused", addr, err)
		}
	}
}
