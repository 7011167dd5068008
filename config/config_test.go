package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/limits"
)

// testEnv is the environment the file-based tests see.
func testEnv(name string) (string, bool) {
	v, ok := map[string]string{
		"TRENDGATE_UPSTREAM_KEY": "upstream-secret",
		"TG_TEST_LISTEN":         "127.0.0.1:8181",
		"TG_TEST_EMPTY":          "",
		"TG_TEST_EMPTY_TOKEN":    "",
	}[name]
	return v, ok
}

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v; want nil", err)
	}
	if got := len(c.Keys); got != 0 {
		t.Errorf("len(Default().Keys) = %d; want 0", got)
	}
	for _, name := range []string{PlanFull, PlanLimited} {
		if _, ok := c.Plans[name]; !ok {
			t.Errorf("Default().Plans has no %q", name)
		}
	}
	if c.ClusterMode() {
		t.Errorf("Default().ClusterMode() = true; want false")
	}
	// Each call is independent: changing one must not change the next.
	c.Plans[PlanFull] = Plan{}
	c.Plans[PlanLimited].Fields.List[0] = "changed"
	if d := Default(); d.Plans[PlanFull].PerSecond != 20 || d.Plans[PlanLimited].Fields.List[0] != "topic" {
		t.Errorf("Default() shares state between calls")
	}
}

func TestDefaultLimitedPlan(t *testing.T) {
	p := Default().Plans[PlanLimited]
	if got, want := p.Policy, (limits.Policy{PerSecond: 5, Burst: 10, Daily: 5000, Monthly: 100000}); got != want {
		t.Errorf("limited policy = %+v; want %+v", got, want)
	}
	for _, f := range p.Fields.List {
		if f == "interactions_24h" {
			t.Errorf("limited list fields include interactions_24h")
		}
	}
	if got, want := len(p.Fields.List), len(KnownFields[api.EndpointList])-1; got != want {
		t.Errorf("len(limited list fields) = %d; want %d", got, want)
	}
	if got, want := p.Fields.Whatsup, []string{"summary"}; !reflect.DeepEqual(got, want) {
		t.Errorf("limited whatsup fields = %v; want %v", got, want)
	}
	if got, want := p.Fields.TSV, KnownFields[api.EndpointTSV]; !reflect.DeepEqual(got, want) {
		t.Errorf("limited tsv fields = %v; want %v", got, want)
	}
	for _, f := range []string{"close", "market_cap", "galaxy_score", "alt_rank"} {
		for _, g := range p.Fields.Series {
			if f == g {
				t.Errorf("limited series fields include market field %q", f)
			}
		}
	}
}

func TestExampleFile(t *testing.T) {
	data, err := os.ReadFile("../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data, testEnv)
	if err != nil {
		t.Fatalf("Parse(config.example.yaml) = %v", err)
	}

	// Spot checks of what the comments promise.
	if got.Upstream.APIKey != "upstream-secret" {
		t.Errorf("upstream.api_key = %q; want the value of TRENDGATE_UPSTREAM_KEY", got.Upstream.APIKey)
	}
	if got.ClusterMode() {
		t.Errorf("ClusterMode() = true; want false (redis.url is commented out)")
	}
	if got.TLS.Mode != TLSModeOff || got.TLS.HSTSMaxAge != 8760*time.Hour {
		t.Errorf("tls mode, hsts = %q, %v; want off, 8760h", got.TLS.Mode, got.TLS.HSTSMaxAge)
	}
	if len(got.Accounts) != 1 || len(got.Keys) != 3 || got.Keys[0].Account != got.Accounts[0].ID ||
		got.Keys[1].Account != got.Accounts[0].ID || got.Keys[2].Plan != PlanLimited {
		t.Fatalf("accounts, keys = %+v, %+v; want one account with two placeholder keys and a key of its own", got.Accounts, got.Keys)
	}

	// Everything else equals the defaults: the comments say so.
	want := Default()
	want.Upstream.APIKey = "upstream-secret"
	want.Admin.Tokens = []AdminToken{{ID: "example-operator", SHA256: strings.Repeat("0", 63) + "4", Scopes: []string{"read", "keys", "purge"}}}
	want.Server.TrustedProxies = []string{} // the file spells the empty lists out
	want.TLS.ACME.Domains = []string{}
	want.Server.CORS.AllowedOrigins = []string{}
	want.Routes = ExampleRoutes()
	for plan, routes := range ExamplePlanRoutes() {
		p := want.Plans[plan]
		p.Endpoints = append(p.Endpoints, routes...)
		want.Plans[plan] = p
	}
	daily := int64(10000)
	want.Accounts = []Account{{ID: "example-team", Plan: PlanFull, Daily: &daily}}
	want.Keys = []Key{
		{ID: "example-team-web", SHA256: strings.Repeat("0", 63) + "1", Account: "example-team"},
		{ID: "example-team-batch", SHA256: strings.Repeat("0", 63) + "2", Account: "example-team"},
		{ID: "example-solo", SHA256: strings.Repeat("0", 63) + "3", Plan: PlanLimited},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config.example.yaml differs from the defaults:\ngot  %+v\nwant %+v", got, want)
	}
}

// TestInvalidFiles loads each testdata/invalid/*.yaml and requires every
// line of the matching .err file to appear in the one error it returns.
func TestInvalidFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 12 {
		t.Fatalf("found %d invalid cases; want at least 12", len(files))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			wantText, err := os.ReadFile(strings.TrimSuffix(file, ".yaml") + ".err")
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse(data, testEnv)
			if err == nil {
				t.Fatalf("Parse succeeded; want an error")
			}
			if cfg != nil {
				t.Errorf("Parse returned a config with its error")
			}
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("error %T is not *config.Error", err)
			}
			for _, want := range strings.Split(strings.TrimSpace(string(wantText)), "\n") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q; got:\n%v", want, err)
				}
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "upstream-secret") {
				t.Errorf("error echoes a secret:\n%v", err)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	t.Setenv("TRENDGATE_UPSTREAM_KEY", "from-env")
	c, err := Load("../config.example.yaml")
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	if c.Upstream.APIKey != "from-env" {
		t.Errorf("api_key = %q; want from-env", c.Upstream.APIKey)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("log:\n  level: loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	var cerr *Error
	if !errors.As(err, &cerr) || cerr.File != bad || !strings.Contains(err.Error(), bad+": log.level") {
		t.Errorf("Load(bad) = %v; want an *Error naming %s", err, bad)
	}

	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v; want os.ErrNotExist", err)
	}
}

func TestEmptyFileIsDefault(t *testing.T) {
	for _, text := range []string{"", "# only a comment\n", "---\n"} {
		c, err := Parse([]byte(text), nil)
		if err != nil {
			t.Fatalf("Parse(%q) = %v", text, err)
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("Parse(%q) differs from Default()", text)
		}
	}
}

func TestExpand(t *testing.T) {
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"A": "alpha", "B_2": "beta", "EMPTY": "", "NL": "x\ny", "DOLLAR": "$B_2",
			"BANG": "!secret", "AMP": "&anchor", "HASH": "a #b", "COLON": "a: b", "NULLV": "null", "NUM": "42",
			"DQ": `say "hi" \ ok`, "SQ": "it's"}[name]
		return v, ok
	}
	tests := []struct {
		name, in, want string
		problems       []string
	}{
		{name: "none", in: "a: b\n", want: "a: b\n"},
		{name: "one", in: "k: ${A}\n", want: "k: alpha\n"},
		{name: "two on a line", in: "k: ${A}-${B_2}\n", want: "k: alpha-beta\n"},
		{name: "empty value", in: "k: '${EMPTY}'\n", want: "k: ''\n"},
		{name: "literal", in: "k: $${A}\n", want: "k: ${A}\n"},
		{name: "literal then var", in: "k: $${A}${A}\n", want: "k: ${A}alpha\n"},
		{name: "lone dollars", in: "k: $5 $$ a$b $\n", want: "k: $5 $$ a$b $\n"},
		{name: "value not re-expanded", in: "k: ${DOLLAR}\n", want: "k: $B_2\n"},
		{name: "comment line kept", in: "  # ${UNSET}\nk: ${A}\n", want: "  # ${UNSET}\nk: alpha\n"},
		{name: "no final newline", in: "k: ${A}", want: "k: alpha"},
		{name: "unset", in: "a: 1\nk: ${UNSET}\n", want: "a: 1\nk: \n",
			problems: []string{"line 2: environment variable UNSET is not set"}},
		{name: "unterminated", in: "k: ${A\n", want: "k: ${A\n",
			problems: []string{`line 1: unterminated "${"`}},
		{name: "bad name", in: "k: ${1A}\n", want: "k: \n",
			problems: []string{`line 1: invalid variable name "1A"`}},
		{name: "line break in value", in: "\n\nk: ${NL}\n", want: "\n\nk: \n",
			problems: []string{"line 3: environment variable NL holds a line break"}},
		{name: "plain value starting with !", in: "k: ${BANG}\n", want: "k: \"!secret\"\n"},
		{name: "plain value starting with &", in: "k: ${AMP} # note\n", want: "k: \"&anchor\" # note\n"},
		{name: "plain value with ' #'", in: "k: ${HASH}\n", want: "k: \"a #b\"\n"},
		{name: "plain value with ': '", in: "- ${COLON}\n", want: "- \"a: b\"\n"},
		{name: "plain value reading as null", in: "k: ${NULLV}\n", want: "k: \"null\"\n"},
		{name: "number stays plain", in: "k: ${NUM}\n", want: "k: 42\n"},
		{name: "inside double quotes", in: "k: \"<${DQ}>\"\n", want: "k: \"<say \\\"hi\\\" \\\\ ok>\"\n"},
		{name: "inside single quotes", in: "k: '${SQ}'\n", want: "k: 'it''s'\n"},
		{name: "unsafe inside a longer plain value", in: "k: pre-${HASH}\n", want: "k: pre-\n",
			problems: []string{"line 1: environment variable HASH holds characters that would change the YAML around it"}},
		{name: "several problems", in: "a: ${X}\nb: ${Y}\n", want: "a: \nb: \n",
			problems: []string{"line 1: environment variable X is not set", "line 2: environment variable Y is not set"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, problems := expand([]byte(tc.in), env)
			if string(got) != tc.want {
				t.Errorf("expand(%q) = %q; want %q", tc.in, got, tc.want)
			}
			if len(problems) != len(tc.problems) {
				t.Fatalf("problems = %q; want %d like %q", problems, len(tc.problems), tc.problems)
			}
			for i, p := range problems {
				if !strings.HasPrefix(p, tc.problems[i]) {
					t.Errorf("problem %d = %q; want prefix %q", i, p, tc.problems[i])
				}
				if strings.Contains(p, "x\ny") || strings.Contains(p, "alpha") || strings.Contains(p, "a #b") {
					t.Errorf("problem %q echoes a value", p)
				}
			}
		})
	}
	t.Run("nil lookup", func(t *testing.T) {
		_, _, problems := expand([]byte("k: ${A}\n"), nil)
		if len(problems) != 1 {
			t.Errorf("problems = %q; want one", problems)
		}
	})
}

// TestParseKeepsSecretsIntact: a secret reaches its setting byte for byte
// whatever it holds, and no error echoes one.
func TestParseKeepsSecretsIntact(t *testing.T) {
	for _, secret := range []string{"!tok en", "&anchor", "a #b", "x: y", "*alias", "null", `q"uo'te\`, "  padded  "} {
		env := func(string) (string, bool) { return secret, true }
		for _, text := range []string{"admin:\n  token: ${T}\n", "admin:\n  token: \"${T}\"\n", "admin:\n  token: '${T}'\n"} {
			c, err := Parse([]byte(text), env)
			if err != nil {
				t.Errorf("%q with %q: %v", text, secret, err)
				continue
			}
			if c.Admin.Token != secret {
				t.Errorf("%q with %q: token %q", text, secret, c.Admin.Token)
			}
		}
	}
	env := func(string) (string, bool) { return "s3cret-not-a-number", true }
	_, err := Parse([]byte("upstream:\n  max_conns: ${N}\n"), env)
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "${N}") {
		t.Errorf("type error for a variable: %v; want an error naming ${N} and never its value", err)
	}
}

func TestParseExpandsBeforeDecoding(t *testing.T) {
	c, err := Parse([]byte("server:\n  listen: ${TG_TEST_LISTEN}\nadmin:\n  token: \"$${literal}\"\n"), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Listen != "127.0.0.1:8181" {
		t.Errorf("server.listen = %q; want 127.0.0.1:8181", c.Server.Listen)
	}
	if c.Admin.Token != "${literal}" {
		t.Errorf("admin.token = %q; want ${literal}", c.Admin.Token)
	}
}

func TestPlanReplacement(t *testing.T) {
	text := `
plans:
  full:
    per_second: 1
    burst: 2
    endpoints: [list]
    data_mode: full
  gold:
    per_second: 100
    burst: 200
    endpoints: [series, tsv]
    data_mode: limited
    fields:
      series: [time, close]
`
	c, err := Parse([]byte(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want Plan
	}{
		// Replaced entirely: daily and monthly are 0, not the built-in's.
		{PlanFull, Plan{Policy: limits.Policy{PerSecond: 1, Burst: 2}, Endpoints: []string{"list"}, DataMode: DataModeFull}},
		// Not named in the file: the built-in stays.
		{PlanLimited, Default().Plans[PlanLimited]},
		// A new plan is added.
		{"gold", Plan{Policy: limits.Policy{PerSecond: 100, Burst: 200}, Endpoints: []string{"series", "tsv"},
			DataMode: DataModeLimited, Fields: Fields{Series: []string{"time", "close"}}}},
	}
	if got := len(c.Plans); got != len(tests) {
		t.Errorf("len(plans) = %d; want %d", got, len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Plans[tc.name]; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plans[%s] = %+v; want %+v", tc.name, got, tc.want)
			}
		})
	}
}

func TestLimitedPlanWithoutFieldsIsValid(t *testing.T) {
	// Fail closed: a limited plan that lists no fields keeps no fields.
	c, err := Parse([]byte("plans:\n  limited:\n    endpoints: [list, tsv]\n    data_mode: limited\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Plans[PlanLimited]
	if len(p.Fields.For(api.EndpointList)) != 0 || len(p.Fields.For(api.EndpointTSV)) != 0 {
		t.Errorf("fields = %+v; want none", p.Fields)
	}
}

func TestResolvedKeys(t *testing.T) {
	text := `
keys:
  - id: plain
    sha256: "1111111111111111111111111111111111111111111111111111111111111111"
    plan: limited
  - id: custom
    sha256: "2222222222222222222222222222222222222222222222222222222222222222"
    plan: full
    per_second: 2.5
    daily: 0
    monthly: 7
  - id: off
    sha256: "3333333333333333333333333333333333333333333333333333333333333333"
    plan: full
    disabled: true
    expires: 2027-01-02T03:04:05Z
    burst: 5
`
	c, err := Parse([]byte(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := c.ResolvedKeys()
	want := []struct {
		id, plan string
		policy   limits.Policy
	}{
		{"plain", PlanLimited, limits.Policy{PerSecond: 5, Burst: 10, Daily: 5000, Monthly: 100000}},
		{"custom", PlanFull, limits.Policy{PerSecond: 2.5, Burst: 40, Daily: 0, Monthly: 7}},
		{"off", PlanFull, limits.Policy{PerSecond: 20, Burst: 5, Daily: 100000, Monthly: 2000000}},
	}
	if len(got) != len(want) {
		t.Fatalf("len(ResolvedKeys()) = %d; want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Key.ID != w.id || got[i].Plan != w.plan || got[i].Policy != w.policy {
			t.Errorf("ResolvedKeys()[%d] = {%s %s %+v}; want {%s %s %+v}", i, got[i].Key.ID, got[i].Plan, got[i].Policy, w.id, w.plan, w.policy)
		}
	}
	off := got[2].Key
	if !off.Disabled || off.Expires == nil || !off.Expires.Equal(time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("key off = %+v; want disabled, expiring 2027-01-02T03:04:05Z", off)
	}

	// A key on a missing plan (only in an invalid config) is left out.
	c.Keys = append(c.Keys, Key{ID: "orphan", Plan: "gone"})
	if got := len(c.ResolvedKeys()); got != len(want) {
		t.Errorf("len(ResolvedKeys()) with an orphan key = %d; want %d", got, len(want))
	}
}

func TestCacheTier(t *testing.T) {
	tests := []struct {
		name      string
		r         Redis
		url, mode string
	}{
		{"no redis", Redis{}, "", ""},
		{"explicit", Redis{URL: "redis://h:6379/0", CacheURL: "redis://c:6379/5"}, "redis://c:6379/5", "single"},
		{"explicit beside a cluster", Redis{URL: "redis://a:7000", Mode: "cluster", CacheURL: "redis://c:7000"}, "redis://c:7000", "cluster"},
		{"db plus one", Redis{URL: "redis://h:6379/2"}, "redis://h:6379/3", ""},
		{"no db", Redis{URL: "rediss://u:p@h:6380"}, "rediss://u:p@h:6380/1", ""},
		{"cluster by addr: the same cluster", Redis{URL: "redis://a:7000?addr=b:7000"}, "redis://a:7000?addr=b:7000", ""},
		{"cluster by mode: the same cluster", Redis{URL: "redis://a:7000", Mode: "cluster"}, "redis://a:7000", "cluster"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if url, mode := tc.r.CacheTier(); url != tc.url || mode != tc.mode {
				t.Errorf("CacheTier() = %q, %q; want %q, %q", url, mode, tc.url, tc.mode)
			}
		})
	}
}

func TestClusterMode(t *testing.T) {
	c, err := Parse([]byte("redis:\n  url: redis://127.0.0.1:6379/0\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.ClusterMode() {
		t.Errorf("ClusterMode() = false; want true with redis.url set")
	}
	// With Redis, ACME needs no storage directory.
	c.TLS.Mode = TLSModeACME
	c.TLS.ACME.Domains = []string{"api.example.com"}
	if err := c.Validate(); err != nil {
		t.Errorf("acme with redis and no storage: Validate() = %v; want nil", err)
	}
}

func TestDomainSectionsPrefixed(t *testing.T) {
	var p problems
	p.addSection("cache.", errors.Join(errors.New("ttl.list: must be > 0"), fmt.Errorf("max_bytes: too small")))
	p.addSection("limits.", nil)
	want := problems{"cache.ttl.list: must be > 0", "cache.max_bytes: too small"}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("problems = %q; want %q", p, want)
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		err  *Error
		want string
	}{
		{&Error{Problems: []string{"log.level: bad"}}, "config: log.level: bad"},
		{&Error{File: "f.yaml", Problems: []string{"a: x", "b: y"}}, "config: f.yaml: 2 problems:\n\ta: x\n\tb: y"},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q; want %q", got, tc.want)
		}
	}
	var nilCfg *Config
	if nilCfg.Validate() == nil {
		t.Errorf("(*Config)(nil).Validate() = nil; want an error")
	}
}

func BenchmarkParseExample(b *testing.B) {
	data, err := os.ReadFile("../config.example.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, testEnv); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAccessEnabled(t *testing.T) {
	on, off := true, false
	tests := []struct {
		name   string
		access *bool
		want   bool
	}{{"unset", nil, true}, {"true", &on, true}, {"false", &off, false}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Log{Access: tc.access}).AccessEnabled(); got != tc.want {
				t.Errorf("AccessEnabled() = %v; want %v", got, tc.want)
			}
		})
	}
	c, err := Parse([]byte("log:\n  access: false\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.AccessEnabled() {
		t.Errorf("log.access: false gave AccessEnabled() = true")
	}
}

// TestExampleDocumentsEverySetting requires config.example.yaml to show
// every setting of the schema (commented-out examples count), and nothing
// that is not a setting, so a field added to any section without a line in
// the example fails here.
func TestExampleDocumentsEverySetting(t *testing.T) {
	data, err := os.ReadFile("../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var schema []string
	schemaPaths(reflect.TypeOf(Config{}), "", &schema)
	var patterns []*regexp.Regexp
	for _, s := range schema {
		patterns = append(patterns, regexp.MustCompile(`^`+strings.ReplaceAll(regexp.QuoteMeta(s), `\*`, `[^.]+`)+`$`))
	}
	shown := examplePaths(string(data))
	for i, s := range schema {
		found := false
		for _, p := range shown {
			found = found || patterns[i].MatchString(p)
		}
		if !found {
			t.Errorf("config.example.yaml does not show setting %s", s)
		}
	}
	for _, p := range shown {
		found := false
		for _, re := range patterns {
			found = found || re.MatchString(p)
		}
		if !found {
			t.Errorf("config.example.yaml shows %s, which is not a setting", p)
		}
	}
}

// schemaPaths appends the YAML path of every leaf setting under t, with
// "[]" for list items and "*" for map keys.
func schemaPaths(t reflect.Type, prefix string, out *[]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if opts == "inline" {
			schemaPaths(f.Type, prefix, out)
			continue
		}
		path := prefix + tag
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}):
			schemaPaths(ft, path+".", out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			schemaPaths(ft.Elem(), path+"[].", out)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			schemaPaths(ft.Elem(), path+".*.", out)
		default:
			*out = append(*out, path)
		}
	}
}

// examplePaths returns the path of every leaf key in an indented YAML text
// (block style only). A comment line "# key: value" with a one-word value
// is a commented-out setting and counts as a key; "- " opens a list item.
func examplePaths(text string) []string {
	keyLine := regexp.MustCompile(`^( *)(- )?([a-z0-9_]+):( .*)?$`)
	commentedKey := regexp.MustCompile(`^( *)# ([a-z0-9_]+): \S+$`)
	listItem := regexp.MustCompile(`^ *- `)
	type level struct {
		indent int
		name   string
	}
	var stack []level
	var paths []string
	for _, line := range strings.Split(text, "\n") {
		if listItem.MatchString(line) && len(stack) > 0 {
			top := &stack[len(stack)-1]
			top.name = strings.TrimSuffix(top.name, "[]") + "[]"
		}
		var indent int
		var name string
		if m := keyLine.FindStringSubmatch(line); m != nil {
			indent, name = len(m[1])+len(m[2]), m[3]
		} else if m := commentedKey.FindStringSubmatch(line); m != nil {
			indent, name = len(m[1]), m[2]
		} else {
			continue
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, level{indent, name})
		var names []string
		for _, l := range stack {
			names = append(names, l.name)
		}
		paths = append(paths, strings.Join(names, "."))
	}
	// Keep the leaves: a path that another path extends is a section.
	var leaves []string
	for _, p := range paths {
		section := false
		for _, q := range paths {
			section = section || strings.HasPrefix(q, p+".") || strings.HasPrefix(q, p+"[].")
		}
		if !section {
			leaves = append(leaves, p)
		}
	}
	return leaves
}

func TestChanged(t *testing.T) {
	a := Default()
	b := Default()
	if got := Changed(a, b); len(got) != 0 {
		t.Fatalf("Changed(Default, Default) = %v; want none", got)
	}
	b.Server.Listen = ":9999"
	b.Upstream.APIKey = "rotated"
	b.Upstream.Budget.PerMinute = 7
	b.Redis.Timeout = time.Second
	b.Server.TrustedProxies = []string{"10.0.0.0/8"}
	b.Keys = []Key{{ID: "k", SHA256: strings.Repeat("1", 64), Plan: PlanFull}}
	on := false
	b.Server.FastHTTP1 = &on
	want := []string{"server.listen", "server.trusted_proxies", "server.fast_http1", "upstream.api_key", "upstream.budget.per_minute", "redis.timeout", "keys"}
	if got := Changed(a, b); !reflect.DeepEqual(got, want) {
		t.Errorf("Changed = %v; want %v", got, want)
	}
}

// TestNamedAdminTokensGuardTheListener: named admin tokens alone are a
// token, so the admin listener may leave loopback with them.
func TestNamedAdminTokensGuardTheListener(t *testing.T) {
	cfg := Default()
	cfg.Upstream.APIKey = "upstream-secret"
	cfg.Admin.Listen = "0.0.0.0:9090"
	if err := cfg.Validate(); err == nil {
		t.Fatal("an open admin listener without any token validated")
	}
	cfg.Admin.Tokens = []AdminToken{{ID: "alice", SHA256: strings.Repeat("ab", 32)}}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("with a named admin token: %v", err)
	}
}
