package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"trendgate/auth"
)

// setup is one measured configuration: keys keys, each its own account
// when accounts is 0, else spread evenly over accounts accounts.
type setup struct {
	keys, accounts int
}

// name is the setup's column title: "10000" or "100000/10000" (keys in
// accounts).
func (s setup) name() string {
	if s.accounts == 0 {
		return strconv.Itoa(s.keys)
	}
	return fmt.Sprintf("%d/%d", s.keys, s.accounts)
}

// parseSetups reads -keys: a comma-separated list of N (N keys, each its
// own account) or N/A (N keys in A accounts).
func parseSetups(s string) ([]setup, error) {
	var out []setup
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		k, a, grouped := strings.Cut(item, "/")
		keys, err := strconv.Atoi(k)
		if err != nil || keys < 1 {
			return nil, fmt.Errorf("-keys: %q: want N or N/A with N keys >= 1", item)
		}
		st := setup{keys: keys}
		if grouped {
			st.accounts, err = strconv.Atoi(a)
			if err != nil || st.accounts < 1 || st.accounts > keys {
				return nil, fmt.Errorf("-keys: %q: want 1 <= A <= N accounts", item)
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// keySet is a setup's keys: their ids and secrets, made at run time with
// the auth package (only their digests go into the file).
type keySet struct {
	setup
	ids     []string
	secrets []string
}

func newKeySet(s setup) (*keySet, error) {
	ks := &keySet{setup: s, ids: make([]string, s.keys), secrets: make([]string, s.keys)}
	for i := range ks.ids {
		ks.ids[i] = fmt.Sprintf("k%06d", i)
		secret, err := auth.Generate()
		if err != nil {
			return nil, err
		}
		ks.secrets[i] = secret
	}
	return ks, nil
}

// account is the account of key i ("" when every key is its own).
func (ks *keySet) account(i int) string {
	if ks.accounts == 0 {
		return ""
	}
	return fmt.Sprintf("a%06d", i*ks.accounts/ks.keys)
}

// gatewayFile says where one gateway listens and keeps its files.
type gatewayFile struct {
	listen, admin string // host:port
	upstream      string // base URL
	statePath     string // "" for none (cluster mode)
	keysFile      string
	redisURL      string // "" for a single instance
	redisPrefix   string
	redisTimeout  string // "" for the default
}

// Environment variables the generated file reads its secrets from.
const (
	envAdminToken  = "TG_SCALE_ADMIN_TOKEN"
	envUpstreamKey = "TG_SCALE_UPSTREAM_KEY"
)

// benchPlan is the plan of every key: limits and quotas high enough that
// the bench never meets them (one key alone may carry the whole load), but
// set, so that admission does the work a plan with quotas does (the rate
// limiter, quota reservation, state).
const benchPlan = `plans:
  bench:
    per_second: 5000
    burst: 10000
    daily: 10000000
    monthly: 100000000
    endpoints: [list, series]
    data_mode: full
`

// render writes the configuration file of g with ks's keys. The keys
// section is the last one, so that keyLines can be appended to it.
func (ks *keySet) render(g gatewayFile) []byte {
	var b bytes.Buffer
	b.Grow(ks.keys*120 + ks.accounts*40 + 2048)
	fmt.Fprintf(&b, `server:
  listen: %s
admin:
  listen: %s
  token: ${%s}
  tokens: []
log:
  level: info
  access: false
upstream:
  base_url: %s
  api_key: ${%s}
cache:
  ttl:
    list: 60m
    series_hour_max: 60m
`, g.listen, g.admin, envAdminToken, g.upstream, envUpstreamKey)
	if g.statePath != "" {
		fmt.Fprintf(&b, "state:\n  path: %s\n", g.statePath)
	}
	if g.redisURL != "" {
		fmt.Fprintf(&b, "redis:\n  url: %s\n  prefix: %q\n", g.redisURL, g.redisPrefix)
		if g.redisTimeout != "" {
			fmt.Fprintf(&b, "  timeout: %s\n", g.redisTimeout)
		}
	}
	fmt.Fprintf(&b, "keys_file: %s\n", g.keysFile)
	b.WriteString(benchPlan)
	if ks.accounts > 0 {
		b.WriteString("accounts:\n")
		for a := range ks.accounts {
			fmt.Fprintf(&b, "  - id: a%06d\n    plan: bench\n", a)
		}
	}
	b.WriteString("keys:\n")
	w := bufio.NewWriter(&b)
	for i := range ks.ids {
		ks.writeKey(w, ks.ids[i], auth.Digest(ks.secrets[i]), ks.account(i))
	}
	_ = w.Flush()
	return b.Bytes()
}

// writeKey writes one entry of the keys section.
func (ks *keySet) writeKey(w *bufio.Writer, id, digest, account string) {
	fmt.Fprintf(w, "  - id: %s\n    sha256: %s\n", id, digest)
	if account != "" {
		fmt.Fprintf(w, "    account: %s\n", account)
	} else {
		w.WriteString("    plan: bench\n")
	}
}

// keyLines returns the lines of one more key, in account of key 0, for
// appending to a rendered file.
func (ks *keySet) keyLines(id, secret string) []byte {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	ks.writeKey(w, id, auth.Digest(secret), ks.account(0))
	_ = w.Flush()
	return b.Bytes()
}

// breakLastLine returns file with its last line indented one space less
// than the lines of its block: a YAML syntax mistake ("did not find
// expected '-' indicator") that the parser reports at the line where the
// keys section begins, so that finding the line of the mistake is left to
// the gateway (config check names the line).
func breakLastLine(file []byte) []byte {
	body := bytes.TrimRight(file, "\n")
	i := bytes.LastIndexByte(body, '\n')
	out := append([]byte(nil), body[:i+1]...)
	last := body[i+1:]
	return append(append(out, bytes.TrimPrefix(last, []byte(" "))...), '\n')
}

// writeFile writes data to path (mode 0600: it names the digests of keys).
func writeFile(path string, data []byte) error {
	return os.WriteFile(path, data, 0o600)
}
