package deploy_test

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"trendgate/auth"
	"trendgate/config"
)

const composeDir = "compose"

// composeFile is the part of the Compose specification deploy/compose
// uses. Decoding is strict, so a key outside it (a typo, or a setting this
// test does not know to check) fails the test.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	// Extension fields (x-...) hold the YAML anchors the services merge.
	XTrendgate  composeService    `yaml:"x-trendgate"`
	XGatewayEnv map[string]string `yaml:"x-gateway-env"`
}

type composeService struct {
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	Restart     string            `yaml:"restart"`
	// StopGracePeriod is how long `docker compose stop` waits after
	// SIGTERM before SIGKILL.
	StopGracePeriod string   `yaml:"stop_grace_period"`
	ReadOnly        bool     `yaml:"read_only"`
	CapDrop         []string `yaml:"cap_drop"`
	SecurityOpt     []string `yaml:"security_opt"`
	DependsOn       any      `yaml:"depends_on"`
	Healthcheck     *struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
		Timeout  string   `yaml:"timeout"`
		Retries  int      `yaml:"retries"`
	} `yaml:"healthcheck"`
}

// interpolation is Compose's ${VAR}, ${VAR:-default} and $$.
var interpolation = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// interpolate does what Compose does to s with an empty environment: a
// variable takes its default; one without a default is an error (Compose
// would substitute "" with a warning, which no setting here wants).
func interpolate(t *testing.T, s string) string {
	t.Helper()
	return interpolation.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		sub := interpolation.FindStringSubmatch(m)
		if sub[2] == "" {
			t.Errorf("compose: %s has no default; `docker compose up` would need it set", m)
		}
		return sub[3]
	})
}

// readCompose reads deploy/compose/compose.yaml, interpolated as Compose
// would with an empty environment.
func readCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(composeDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	dec := yaml.NewDecoder(strings.NewReader(interpolate(t, string(raw))))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return f
}

// mounts maps each bind mount's container path to its host path (relative
// to deploy/, as the test runs there); named volumes map to "volume:NAME".
func (s composeService) mounts(t *testing.T, f composeFile) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 || len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw" {
			t.Errorf("volume %q: want SOURCE:TARGET[:ro]", v)
			continue
		}
		src, dst := parts[0], parts[1]
		if strings.HasPrefix(src, ".") {
			host := filepath.Join(composeDir, src)
			if _, err := os.Stat(host); err != nil {
				t.Errorf("volume %q: %v", v, err)
			}
			m[dst] = host
			continue
		}
		if _, ok := f.Volumes[src]; !ok {
			t.Errorf("volume %q: named volume %s is not declared under volumes:", v, src)
		}
		m[dst] = "volume:" + src
	}
	return m
}

// hostFile returns the host path of the container file p, through the
// service's bind mounts (a mounted file or a file under a mounted
// directory), or fails the test.
func hostFile(t *testing.T, mounts map[string]string, p string) string {
	t.Helper()
	best, found := "", ""
	for dst, src := range mounts { // the deepest mount holding p wins
		if strings.HasPrefix(src, "volume:") || len(dst) <= len(best) {
			continue
		}
		if p == dst {
			best, found = dst, src
		} else if rel, ok := strings.CutPrefix(p, dst+"/"); ok {
			best, found = dst, filepath.Join(src, filepath.FromSlash(rel))
		}
	}
	if found == "" {
		t.Fatalf("%s is not in any bind mount (%v)", p, mounts)
	}
	return found
}

// publishedPorts maps each container port to its host address, checking
// that every port is published on loopback only.
func publishedPorts(t *testing.T, name string, s composeService) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		if len(parts) != 3 || parts[0] != "127.0.0.1" {
			t.Errorf("%s: port %q: want 127.0.0.1:HOST:CONTAINER (loopback only)", name, p)
			continue
		}
		out[parts[2]] = net.JoinHostPort(parts[0], parts[1])
	}
	return out
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return port
}

// TestCompose checks deploy/compose without Docker: the services are
// there and wired to each other by the names and ports each side
// configures, every file a service mounts exists, the gateway's config
// passes trendgate's own validation with the environment Compose gives
// it, Prometheus scrapes both admin listeners with the same token the
// gateways require, and Grafana gets the dashboard and the data source.
func TestCompose(t *testing.T) {
	f := readCompose(t)
	for _, name := range []string{"redis", "upstream", "trendgate-a", "trendgate-b", "prometheus", "grafana"} {
		if _, ok := f.Services[name]; !ok {
			t.Fatalf("service %s is missing", name)
		}
	}
	if b := f.XTrendgate.Build; b == nil || filepath.Join(composeDir, b.Context, b.Dockerfile) != filepath.Join("..", "Dockerfile") {
		t.Errorf("x-trendgate build: want the repository's Dockerfile (context ../..), got %+v", b)
	}

	hostPorts := map[string]string{} // host address → service
	for name, s := range f.Services {
		for _, addr := range publishedPorts(t, name, s) {
			if other, dup := hostPorts[addr]; dup {
				t.Errorf("host address %s published by %s and %s", addr, other, name)
			}
			hostPorts[addr] = name
		}
	}

	redis := f.Services["redis"]
	if !slices.Contains(redis.Command, "--appendonly") || redis.Command[slices.Index(redis.Command, "--appendonly")+1] != "yes" {
		t.Errorf("redis: want --appendonly yes (counters must survive a restart), got %v", redis.Command)
	}
	if got := redis.mounts(t, f)["/data"]; !strings.HasPrefix(got, "volume:") {
		t.Errorf("redis: /data is not on a named volume (got %q)", got)
	}

	up := f.Services["upstream"]
	if len(up.Command) == 0 || up.Command[0] != "demo-upstream" {
		t.Fatalf("upstream: want command demo-upstream ..., got %v", up.Command)
	}
	upFlags := map[string]string{}
	for _, a := range up.Command[1:] {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if !ok {
			t.Fatalf("upstream: write flags as -name=value, got %q", a)
		}
		upFlags[k] = v
	}

	token := ""
	for _, name := range []string{"trendgate-a", "trendgate-b"} {
		t.Run(name, func(t *testing.T) {
			s := f.Services[name]
			if want := []string{"serve", "-config", "/etc/trendgate/config.yaml"}; !slices.Equal(s.Command, want) {
				t.Errorf("command: got %v; want %v", s.Command, want)
			}
			if s.Image != "trendgate:compose" || !s.ReadOnly || !slices.Equal(s.CapDrop, []string{"ALL"}) {
				t.Errorf("want the trendgate:compose image, read-only, all capabilities dropped; got %q %v %v", s.Image, s.ReadOnly, s.CapDrop)
			}
			cfgFile := hostFile(t, s.mounts(t, f), "/etc/trendgate/config.yaml")
			data, err := os.ReadFile(cfgFile)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Parse(data, func(k string) (string, bool) { v, ok := s.Environment[k]; return v, ok })
			if err != nil {
				t.Fatalf("%s: %v", cfgFile, err)
			}
			if token == "" {
				token = cfg.Admin.Token
			}
			if cfg.Admin.Token == "" || cfg.Admin.Token != token {
				t.Errorf("admin.token: got %q; want one token, the same on both instances", cfg.Admin.Token)
			}
			ports := publishedPorts(t, name, s)
			for setting, addr := range map[string]string{"server.listen": cfg.Server.Listen, "admin.listen": cfg.Admin.Listen} {
				host, port, err := net.SplitHostPort(addr)
				if err != nil || host != "" && host != "0.0.0.0" {
					t.Errorf("%s %q: want :PORT (every interface of the container)", setting, addr)
				}
				if _, ok := ports[port]; !ok {
					t.Errorf("%s port %s is not published (ports %v)", setting, port, s.Ports)
				}
			}
			if cfg.Redis.URL == "" {
				t.Fatal("redis.url: want cluster mode")
			}
			ru, err := url.Parse(cfg.Redis.URL)
			if err != nil || ru.Hostname() != "redis" {
				t.Errorf("redis.url %q: want the redis service", cfg.Redis.URL)
			}
			if cfg.Redis.LocalShare != 0.5 {
				t.Errorf("redis.local_share: got %v; want 0.5 (1/instances)", cfg.Redis.LocalShare)
			}
			bu, err := url.Parse(cfg.Upstream.BaseURL)
			if err != nil || bu.Hostname() != "upstream" || bu.Port() != portOf(t, upFlags["listen"]) {
				t.Errorf("upstream.base_url %q: want http://upstream:<the demo upstream's -listen port> (-listen=%s)", cfg.Upstream.BaseURL, upFlags["listen"])
			}
			if cfg.Upstream.APIKey == "" || cfg.Upstream.APIKey != upFlags["api-key"] {
				t.Errorf("upstream.api_key %q and the demo upstream's -api-key %q differ", cfg.Upstream.APIKey, upFlags["api-key"])
			}
			if hc := s.Healthcheck; hc != nil {
				t.Errorf("healthcheck: the image's (trendgate healthcheck -config) serves; got an override %v", hc.Test)
			}
			// The safe setup: the state files on a named volume of this
			// instance's own, a shutdown delay within stop_grace_period.
			var dirs []string
			for target, src := range s.mounts(t, f) {
				if vol, ok := strings.CutPrefix(src, "volume:"); ok && strings.HasPrefix(vol, name) {
					dirs = append(dirs, target)
				}
			}
			stop, err := time.ParseDuration(s.StopGracePeriod)
			if err != nil {
				t.Errorf("stop_grace_period %q: %v", s.StopGracePeriod, err)
			}
			checkSafe(t, cfg, dirs, stop)
		})
	}

	t.Run("prometheus", func(t *testing.T) {
		s := f.Services["prometheus"]
		mounts := s.mounts(t, f)
		nestedMounts(t, "prometheus", mounts)
		var prom struct {
			Global struct {
				ScrapeInterval     string `yaml:"scrape_interval"`
				EvaluationInterval string `yaml:"evaluation_interval"`
			} `yaml:"global"`
			RuleFiles     []string `yaml:"rule_files"`
			ScrapeConfigs []struct {
				JobName       string `yaml:"job_name"`
				Authorization struct {
					CredentialsFile string `yaml:"credentials_file"`
				} `yaml:"authorization"`
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
			} `yaml:"scrape_configs"`
		}
		cfgPath := "/etc/prometheus/prometheus.yml"
		for i, a := range s.Command {
			if v, ok := strings.CutPrefix(a, "--config.file="); ok {
				cfgPath = v
			} else if a == "--config.file" && i+1 < len(s.Command) {
				cfgPath = s.Command[i+1]
			}
		}
		data, err := os.ReadFile(hostFile(t, mounts, cfgPath))
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&prom); err != nil {
			t.Fatalf("prometheus.yml: %v", err)
		}
		for _, rf := range prom.RuleFiles {
			if got := hostFile(t, mounts, rf); got != rulesFile {
				t.Errorf("rule file %s is %s; want %s", rf, got, rulesFile)
			}
		}
		if len(prom.RuleFiles) == 0 {
			t.Error("no rule_files: the alert rules are not loaded")
		}
		if len(prom.ScrapeConfigs) != 1 {
			t.Fatalf("want one scrape config, got %d", len(prom.ScrapeConfigs))
		}
		sc := prom.ScrapeConfigs[0]
		tok, err := os.ReadFile(hostFile(t, mounts, sc.Authorization.CredentialsFile))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(tok)); got != token {
			t.Errorf("Prometheus's credentials file holds %q; the gateways' admin.token is %q", got, token)
		}
		var targets []string
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
		slices.Sort(targets)
		if want := []string{"trendgate-a:9090", "trendgate-b:9090"}; !slices.Equal(targets, want) {
			t.Errorf("targets: got %v; want %v (the admin listeners)", targets, want)
		}

		// promtool checks the file itself, with the container's paths
		// pointed at the files mounted there.
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Log("promtool not installed: prometheus.yml checked by decoding only")
			return
		}
		text := string(data)
		for _, p := range append([]string{sc.Authorization.CredentialsFile}, prom.RuleFiles...) {
			abs, err := filepath.Abs(hostFile(t, mounts, p))
			if err != nil {
				t.Fatal(err)
			}
			text = strings.ReplaceAll(text, p, abs)
		}
		tmp := filepath.Join(t.TempDir(), "prometheus.yml")
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, promtool, "check", "config", tmp).CombinedOutput(); err != nil {
			t.Errorf("promtool check config: %v\n%s", err, out)
		}
	})

	t.Run("grafana", func(t *testing.T) {
		s := f.Services["grafana"]
		mounts := s.mounts(t, f)
		nestedMounts(t, "grafana", mounts)
		var provider struct {
			APIVersion int `yaml:"apiVersion"`
			Providers  []struct {
				Name            string `yaml:"name"`
				Type            string `yaml:"type"`
				DisableDeletion bool   `yaml:"disableDeletion"`
				AllowUIUpdates  bool   `yaml:"allowUiUpdates"`
				Options         struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		decodeStrict(t, hostFile(t, mounts, "/etc/grafana/provisioning/dashboards/trendgate.yaml"), &provider)
		if len(provider.Providers) != 1 {
			t.Fatalf("want one dashboard provider, got %d", len(provider.Providers))
		}
		board := hostFile(t, mounts, path.Join(provider.Providers[0].Options.Path, "trendgate.json"))
		if board != dashboardFile {
			t.Errorf("provisioned dashboard is %s; want %s", board, dashboardFile)
		}
		var ds struct {
			APIVersion  int `yaml:"apiVersion"`
			Datasources []struct {
				Name      string `yaml:"name"`
				Type      string `yaml:"type"`
				UID       string `yaml:"uid"`
				Access    string `yaml:"access"`
				URL       string `yaml:"url"`
				IsDefault bool   `yaml:"isDefault"`
				Editable  bool   `yaml:"editable"`
			} `yaml:"datasources"`
		}
		decodeStrict(t, hostFile(t, mounts, "/etc/grafana/provisioning/datasources/prometheus.yaml"), &ds)
		if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || !ds.Datasources[0].IsDefault {
			t.Fatalf("want one default prometheus data source, got %+v", ds.Datasources)
		}
		promPorts := publishedPorts(t, "prometheus", f.Services["prometheus"])
		if u, err := url.Parse(ds.Datasources[0].URL); err != nil || u.Hostname() != "prometheus" || promPorts[u.Port()] == "" {
			t.Errorf("data source URL %q: want the prometheus service on its port", ds.Datasources[0].URL)
		}
	})

	t.Run("demo keys in docs/deploy.md", func(t *testing.T) {
		// docs/deploy.md's compose section prints the demo keys' secrets;
		// each must be a key of the compose config.
		doc, err := os.ReadFile("../docs/deploy.md")
		if err != nil {
			t.Fatal(err)
		}
		_, section, ok := bytes.Cut(doc, []byte("\n## Compose\n"))
		if !ok {
			t.Fatal(`docs/deploy.md has no "## Compose" section`)
		}
		section, _, _ = bytes.Cut(section, []byte("\n## "))
		data, err := os.ReadFile(filepath.Join(composeDir, "trendgate", "config.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		s := f.Services["trendgate-a"]
		cfg, err := config.Parse(data, func(k string) (string, bool) { v, ok := s.Environment[k]; return v, ok })
		if err != nil {
			t.Fatal(err)
		}
		secrets := regexp.MustCompile(`tg_[0-9A-Za-z]{40,}`).FindAll(section, -1)
		found := map[string]bool{}
		for _, sec := range secrets {
			for _, k := range cfg.Keys {
				if k.SHA256 == auth.Digest(string(sec)) {
					found[k.ID] = true
				}
			}
		}
		if len(found) != len(cfg.Keys) {
			t.Errorf("docs/deploy.md's compose section gives the secrets of %d of the %d demo keys (%v)", len(found), len(cfg.Keys), found)
		}
		if !strings.Contains(string(section), "docker compose -f deploy/compose/compose.yaml up") {
			t.Error("docs/deploy.md's compose section does not give the command that starts it")
		}
	})
}

func decodeStrict(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// nestedMounts fails when one mount's target lies inside another's:
// Docker must then create the mount point inside the outer mount, which
// fails on a read-only bind mount and litters a named volume.
func nestedMounts(t *testing.T, service string, mounts map[string]string) {
	t.Helper()
	for a := range mounts {
		for b := range mounts {
			if a != b && strings.HasPrefix(b, a+"/") {
				t.Errorf("%s: mount %s lies inside mount %s", service, b, a)
			}
		}
	}
}
