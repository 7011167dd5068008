// Tests of the operator files in deploy/: every metric the Grafana
// dashboard and the Prometheus alert rules use is one a real gateway
// exports (with the labels they select on), and promtool accepts the rules
// and passes their unit tests.
package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

const (
	dashboardFile = "grafana/trendgate.json"
	rulesFile     = "prometheus/trendgate-alerts.yaml"
	rulesTestFile = "prometheus/trendgate-alerts.test.yaml"
)

// exported is what a gateway's registry says about one metric family: its
// label names and, once it has samples, its type.
type exported struct {
	labels map[string]bool
	typ    dto.MetricType
	typed  bool // typ is known (the family was gathered)
}

// descPattern reads a Desc's name and variable labels from its String form:
// client_golang has no accessor for them, and Describe is the only way to
// learn about vectors that have no children yet (Gather skips those).
var descPattern = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)

// gatewayMetrics builds a real gateway in front of the demo upstream,
// sends it a little traffic with a full and a limited key (hits, misses,
// errors, a 429) so that the families with children are gathered too, and
// returns every metric family its registry describes or gathers.
func gatewayMetrics(t *testing.T) map[string]*exported {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC))
	const upKey = "deploy-test-upstream-credential"
	up, err := demo.New(demo.Options{Clock: clk, APIKey: upKey})
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); upSrv.Close() })

	keys := map[string]string{}
	cfg := config.Default()
	cfg.Upstream.BaseURL = upSrv.URL
	cfg.Upstream.APIKey = upKey
	// Cluster mode: the files also chart what only cluster mode exports
	// (Redis availability, fallbacks, the shared tier).
	rdb := redistest.Client(t, redistest.Addr)
	cfg.Redis.URL = "redis://" + redistest.Addr + "/0"
	cfg.Redis.Prefix = redistest.Prefix(t, rdb)
	cfg.Redis.Timeout = time.Second
	for _, plan := range []string{"full", "limited"} {
		k, err := auth.Generate()
		if err != nil {
			t.Fatal(err)
		}
		keys[plan] = k
		cfg.Keys = append(cfg.Keys, config.Key{ID: "deploy-" + plan, SHA256: auth.Digest(k), Plan: plan})
	}
	gw, err := gateway.New(cfg, gateway.Options{Clock: clk, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)

	targets := []string{
		"/api4/public/topics/list/v1",
		"/api4/public/topic/bitcoin/whatsup/v1",
		"/api4/public/topic/bitcoin/time-series/v1",
		"/topic/bitcoin/time-series/interactions.tsv",
		"/api4/public/topic/bitcoin/time-series/v1?bucket=week", // 400
	}
	send := func(target, key string) int {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, key := range []string{keys["full"], keys["limited"], ""} {
		for _, target := range targets {
			send(target, key)
		}
	}
	send(targets[0], "tg_not-a-valid-key")
	// The limited plan's burst is 10: keep asking until it says 429.
	limited := false
	for range 50 {
		if send(targets[0], keys["limited"]) == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	if !limited {
		t.Fatal("the limited key was never rate limited; the traffic did not reach the limiter")
	}

	reg := gw.Registry()
	got := map[string]*exported{}
	descs := make(chan *prometheus.Desc)
	go func() { reg.Describe(descs); close(descs) }()
	for d := range descs {
		m := descPattern.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		e := &exported{labels: map[string]bool{}}
		for _, l := range strings.Split(m[2], ",") {
			if l != "" {
				e.labels[strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")")] = true
			}
		}
		got[m[1]] = e
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		e := got[mf.GetName()]
		if e == nil {
			e = &exported{labels: map[string]bool{}}
			got[mf.GetName()] = e
		}
		e.typ, e.typed = mf.GetType(), true
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				e.labels[lp.GetName()] = true
			}
		}
	}
	return got
}

// selector is one use of a trendgate metric in a PromQL expression: its
// name as written and the label names its {...} matchers select on.
type selector struct {
	name   string
	labels []string
}

// trendgateSelectors scans a PromQL expression (or a Grafana template query
// such as label_values(...)) for metric names starting with "trendgate_"
// and the label names of a matcher list right after each. It is a careful
// lexical scan, not a parser: it skips quoted strings (so label values
// never count), numbers and durations, and Grafana variables ($job,
// ${datasource}, $__rate_interval). PromQL offers no other place where a
// trendgate_ identifier can stand, and the full PromQL parser
// (github.com/prometheus/prometheus/promql/parser) would pull the whole
// Prometheus server module into go.mod for this one test.
func trendgateSelectors(expr string) ([]selector, error) {
	var out []selector
	isStart := func(c byte) bool { return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || '0' <= c && c <= '9' }
	ident := func(i int) int {
		for i < len(expr) && isPart(expr[i]) {
			i++
		}
		return i
	}
	skipString := func(i int) (int, error) {
		q := expr[i]
		for j := i + 1; j < len(expr); j++ {
			switch {
			case expr[j] == '\\' && q != '`':
				j++
			case expr[j] == q:
				return j + 1, nil
			}
		}
		return 0, errors.New("unterminated string")
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				for i < len(expr) && expr[i] != '}' {
					i++
				}
				i++
				continue
			}
			i = ident(i)
		case '0' <= c && c <= '9':
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case isStart(c):
			j := ident(i)
			word := expr[i:j]
			i = j
			if !strings.HasPrefix(word, "trendgate_") {
				continue
			}
			s := selector{name: word}
			k := i
			for k < len(expr) && expr[k] == ' ' {
				k++
			}
			if k < len(expr) && expr[k] == '{' {
				// label matchers: name op "value", ...
				k++
				for k < len(expr) && expr[k] != '}' {
					switch d := expr[k]; {
					case d == '"' || d == '\'' || d == '`':
						e, err := skipString(k)
						if err != nil {
							return nil, err
						}
						k = e
					case isStart(d):
						e := ident(k)
						s.labels = append(s.labels, expr[k:e])
						k = e
					default:
						k++
					}
				}
				if k >= len(expr) {
					return nil, errors.New("unterminated label matchers after " + word)
				}
				i = k + 1
			}
			out = append(out, s)
		default:
			i++
		}
	}
	return out, nil
}

// histogramSuffixes are the series names a histogram family exports
// besides its own.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// check returns why sel does not name something the gateway exports, or "".
// Prometheus adds job and instance to every scraped series; a histogram's
// _bucket series also carry le.
func (sel selector) check(metrics map[string]*exported) string {
	name, extra := sel.name, map[string]bool{"job": true, "instance": true}
	e := metrics[name]
	if e == nil {
		for _, suf := range histogramSuffixes {
			base, ok := strings.CutSuffix(name, suf)
			if !ok {
				continue
			}
			if b := metrics[base]; b != nil && b.typed && b.typ == dto.MetricType_HISTOGRAM {
				e = b
				extra["le"] = suf == "_bucket"
			}
		}
	}
	if e == nil {
		return "not exported"
	}
	for _, l := range sel.labels {
		if !e.labels[l] && !extra[l] {
			return "has no label " + l
		}
	}
	return ""
}

// dashboardExprs returns every PromQL expression of the Grafana dashboard:
// panel targets' expr (in rows too) and the template variables' queries.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				walk(c, k)
			}
		case []any:
			for _, c := range v {
				walk(c, key)
			}
		case string:
			if key == "expr" || key == "query" || key == "definition" {
				exprs = append(exprs, v)
			}
		}
	}
	walk(doc, "")
	return exprs
}

// alertRules is the part of a Prometheus rules file the tests read.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) alertRules {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var r alertRules
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return r
}

// TestMetricNamesExported checks every trendgate_ metric (and each label
// its matchers select on) in the Grafana dashboard and the alert rules
// against the registry of a real gateway that has served some traffic.
// The failure lists the missing names; a name the dashboard needs from
// another part of trendgate fails here until that part exports it.
func TestMetricNamesExported(t *testing.T) {
	metrics := gatewayMetrics(t)

	sources := map[string][]string{dashboardFile: dashboardExprs(t)}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			sources[rulesFile] = append(sources[rulesFile], r.Expr)
		}
	}
	problems := map[string][]string{} // "name: why" → files
	for file, exprs := range sources {
		uses := 0
		for _, expr := range exprs {
			sels, err := trendgateSelectors(expr)
			if err != nil {
				t.Errorf("%s: %q: %v", file, expr, err)
				continue
			}
			uses += len(sels)
			for _, s := range sels {
				if why := s.check(metrics); why != "" {
					p := s.name + ": " + why
					if !slices.Contains(problems[p], file) {
						problems[p] = append(problems[p], file)
					}
				}
			}
		}
		if uses < len(exprs)/2 || uses == 0 {
			t.Errorf("%s: only %d trendgate_ metric uses in %d expressions; is the scan broken?", file, uses, len(exprs))
		}
		t.Logf("%s: %d expressions, %d trendgate_ metric uses", file, len(exprs), uses)
	}
	if len(problems) > 0 {
		var lines []string
		for p, files := range problems {
			sort.Strings(files)
			lines = append(lines, p+" (in "+strings.Join(files, ", ")+")")
		}
		sort.Strings(lines)
		t.Errorf("%d metric uses in deploy/ that the gateway does not export:\n  %s", len(lines), strings.Join(lines, "\n  "))
	}
}

// TestTrendgateSelectors pins the scanner the name check relies on.
func TestTrendgateSelectors(t *testing.T) {
	tests := []struct {
		name, expr string
		want       []selector
	}{
		{name: "plain", expr: `trendgate_ready`, want: []selector{{name: "trendgate_ready"}}},
		{name: "matchers and grafana variables",
			expr: `sum by (outcome) (rate(trendgate_cache_requests_total{job=~"$job", outcome!="x,}"}[$__rate_interval]))`,
			want: []selector{{name: "trendgate_cache_requests_total", labels: []string{"job", "outcome"}}}},
		{name: "label value that looks like a metric",
			expr: `up{job="trendgate_requests_total"} * on(instance) trendgate_ready {instance='a'}`,
			want: []selector{{name: "trendgate_ready", labels: []string{"instance"}}}},
		{name: "histogram and durations",
			expr: `histogram_quantile(0.99, sum by (le) (rate(trendgate_request_duration_seconds_bucket[5m]))) > 1e-3`,
			want: []selector{{name: "trendgate_request_duration_seconds_bucket"}}},
		{name: "template query", expr: `label_values(trendgate_ready{job=~"$job"}, instance)`,
			want: []selector{{name: "trendgate_ready", labels: []string{"job"}}}},
		{name: "datasource variable", expr: `${datasource}`},
		{name: "two metrics", expr: `trendgate_a{window="day"} / (trendgate_b{window="day"} > 0)`,
			want: []selector{{name: "trendgate_a", labels: []string{"window"}}, {name: "trendgate_b", labels: []string{"window"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := trendgateSelectors(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v; want %v", got, tc.want)
			}
			for i := range got {
				if got[i].name != tc.want[i].name || !slices.Equal(got[i].labels, tc.want[i].labels) {
					t.Errorf("selector %d: got %v; want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
	if _, err := trendgateSelectors(`trendgate_x{a="b}`); err == nil {
		t.Error("an unterminated string was accepted")
	}
}

// TestAlertRulesShape checks what promtool does not: every rule is an
// alert with a severity and a summary, and names are unique.
func TestAlertRulesShape(t *testing.T) {
	seen := map[string]bool{}
	n := 0
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" {
				t.Errorf("group %s: a rule without an alert name (expr %q)", g.Name, r.Expr)
			}
			if seen[r.Alert] {
				t.Errorf("alert %s appears twice", r.Alert)
			}
			seen[r.Alert] = true
			switch r.Labels["severity"] {
			case "info", "warning", "critical":
			default:
				t.Errorf("alert %s: severity %q; want info, warning or critical", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: needs a summary and a description", r.Alert)
			}
		}
	}
	for _, want := range []string{
		"TrendgateUpstreamDayBudgetNearlyUsed", "TrendgateUpstreamRateLimited", "TrendgateBreakerOpen",
		"TrendgateHigh5xxRatio", "TrendgateKeyNearDailyQuota", "TrendgateRedisFallbackActive",
		"TrendgateCertificateRenewalFailing", "TrendgateInstanceDown", "TrendgateConfigReloadRefused",
		"TrendgateRestartPending", "TrendgateKeyNearMonthlyQuota", "TrendgateCacheFullAndEvicting",
		"TrendgateCertificateFileExpiringSoon", "TrendgateCertificateFileExpiring",
	} {
		if !seen[want] {
			t.Errorf("alert %s is missing", want)
		}
	}
}

// TestPromtool runs `promtool check rules` and `promtool test rules` on the
// rules. It skips when promtool (Debian package prometheus) is not
// installed, except in CI (CI=true), where .ci/run installs it.
func TestPromtool(t *testing.T) {
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found; CI must have it (.ci/run installs the Debian package prometheus)")
		}
		t.Skip("promtool not installed (Debian package prometheus: apt-get install prometheus); skipping the rules check")
	}
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", rulesTestFile},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
	}
}
