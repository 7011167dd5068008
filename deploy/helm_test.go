package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	sigsyaml "sigs.k8s.io/yaml"

	"trendgate/config"
)

const chartDir = "helm/trendgate"

// helmBin finds helm on PATH or where `go install` puts it. Without it the
// helm tests skip, except in CI (CI=true), where .ci/run installs it.
func helmBin(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", "helm")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("helm not found; CI must have it (.ci/run installs it with go install helm.sh/helm/v3/cmd/helm@<pinned version>)")
	}
	t.Skip("helm not installed (go install helm.sh/helm/v3/cmd/helm@v3.22.0); skipping the chart checks")
	return ""
}

// runHelm runs helm with args and returns its stdout; stderr comes back in
// the error.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helmBin(t), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// ciValues are the values files CI renders the chart with.
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s/ci/*-values.yaml (%v)", chartDir, err)
	}
	return files
}

// TestHelmLint runs `helm lint --strict` with every CI values file.
func TestHelmLint(t *testing.T) {
	for _, values := range ciValues(t) {
		if out, err := runHelm(t, "lint", "--strict", chartDir, "-f", values); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// rendered is one `helm template` output, decoded.
type rendered struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	pdbs        []*policyv1.PodDisruptionBudget
}

// decodeManifests decodes every document of a `helm template` output
// strictly (unknown fields are errors) into the Kubernetes API type of its
// kind; a kind the chart is not expected to make is an error.
func decodeManifests(t *testing.T, out string) rendered {
	t.Helper()
	r := rendered{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, doc := range strings.Split(out, "\n---\n") {
		doc = strings.TrimPrefix(strings.TrimSpace(doc), "---")
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := sigsyaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("manifest: %v\n%s", err, doc)
		}
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			d := &appsv1.Deployment{}
			r.deployments, obj = append(r.deployments, d), d
		case "v1 Service":
			s := &corev1.Service{}
			r.services, obj = append(r.services, s), s
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1 Secret":
			obj = &corev1.Secret{}
		case "policy/v1 PodDisruptionBudget":
			p := &policyv1.PodDisruptionBudget{}
			r.pdbs, obj = append(r.pdbs, p), p
		default:
			t.Fatalf("unexpected manifest %s %s", head.APIVersion, head.Kind)
		}
		if err := sigsyaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s: %v\n%s", head.Kind, err, doc)
		}
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *corev1.Secret:
			r.secrets[o.Name] = o
		}
	}
	return r
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// containerPort resolves a probe's or Service's port (a number or a port
// name) against the container's ports.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func listenPort(t *testing.T, setting, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", setting, addr, err)
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		t.Fatalf("%s %q: %v", setting, addr, err)
	}
	return int32(n)
}

// TestHelmTemplate renders the chart with each CI values file, decodes
// every manifest into the Kubernetes API types and checks them against
// trendgate itself: the ConfigMap's config passes config.Parse with the
// environment the pod gets from the Secret, the container listens where
// that config says, the probes hit /healthz and /readyz on the admin port
// without a token, the memory follows the sizing rule (docs/operations.md)
// for the config's cache.max_bytes, the pod meets the restricted Pod Security Standard (as
// the pod-security admission controller evaluates it), and the Service and
// PodDisruptionBudget select the pods.
func TestHelmTemplate(t *testing.T) {
	for _, values := range ciValues(t) {
		t.Run(filepath.Base(values), func(t *testing.T) {
			out, err := runHelm(t, "template", "tg", chartDir, "--namespace", "trendgate", "-f", values)
			if err != nil {
				t.Fatal(err)
			}
			checkRendered(t, decodeManifests(t, out))
		})
	}
}

func checkRendered(t *testing.T, r rendered) {
	if len(r.deployments) != 1 || len(r.services) != 1 || len(r.configMaps) != 1 || len(r.pdbs) != 1 {
		t.Fatalf("want one Deployment, Service, ConfigMap and PodDisruptionBudget; got %d, %d, %d, %d",
			len(r.deployments), len(r.services), len(r.configMaps), len(r.pdbs))
	}
	d := r.deployments[0]
	pod := d.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	// The config: mounted as a directory from the ConfigMap, and valid.
	if want := []string{"serve", "-config", "/etc/trendgate/config.yaml"}; strings.Join(c.Args, " ") != strings.Join(want, " ") {
		t.Errorf("args: got %v; want %v", c.Args, want)
	}
	var cm *corev1.ConfigMap
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != "/etc/trendgate" {
			continue
		}
		if vm.SubPath != "" {
			t.Errorf("config mounted with subPath %q: it would never see the ConfigMap's updates", vm.SubPath)
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				cm = r.configMaps[v.ConfigMap.Name]
			}
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap of the release is mounted at /etc/trendgate")
	}
	env := podEnv(t, c, r)
	cfg, err := config.Parse([]byte(cm.Data["config.yaml"]), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the ConfigMap's config.yaml does not pass trendgate's validation: %v\n%s", err, cm.Data["config.yaml"])
	}
	if cfg.Admin.Token == "" || cfg.Upstream.APIKey == "" {
		t.Error("admin.token and upstream.api_key must come from the Secret")
	}
	if n := *d.Spec.Replicas; n > 1 {
		if !cfg.ClusterMode() {
			t.Errorf("%d replicas without redis.url: limits and quotas would multiply", n)
		}
		if share := cfg.Redis.LocalShare; share > 1/float64(n)+1e-9 {
			t.Errorf("redis.local_share %v with %d replicas: want at most 1/%d", share, n, n)
		}
	}

	// Ports and probes.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if got, want := ports["http"], listenPort(t, "server.listen", cfg.Server.Listen); got != want {
		t.Errorf("container port http %d; server.listen says %d", got, want)
	}
	if got, want := ports["admin"], listenPort(t, "admin.listen", cfg.Admin.Listen); got != want {
		t.Errorf("container port admin %d; admin.listen says %d", got, want)
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET", pr.name)
			continue
		}
		g := pr.probe.HTTPGet
		if g.Path != pr.path {
			t.Errorf("%s probe path %q; want %q", pr.name, g.Path, pr.path)
		}
		if port, ok := containerPort(c, g.Port); !ok || port != ports["admin"] {
			t.Errorf("%s probe port %s; want the admin port %d", pr.name, g.Port.String(), ports["admin"])
		}
		if len(g.HTTPHeaders) != 0 {
			t.Errorf("%s probe sends headers %v; the probes carry no token", pr.name, g.HTTPHeaders)
		}
	}

	// Memory: the sizing rule (docs/operations.md), 1.25 x cache.max_bytes + 48 MiB, as
	// request and limit, above the Go soft limit trendgate sets.
	rule := cfg.Cache.MaxBytes + cfg.Cache.MaxBytes/4 + 48<<20
	lim, req := c.Resources.Limits[corev1.ResourceMemory], c.Resources.Requests[corev1.ResourceMemory]
	if lim.IsZero() || lim.Value() < rule {
		t.Errorf("memory limit %s; want at least %d (1.25 x cache.max_bytes %d + 48 MiB)", lim.String(), rule, cfg.Cache.MaxBytes)
	}
	if req.Cmp(lim) != 0 {
		t.Errorf("memory request %s != limit %s: the pod could be placed where its cache does not fit", req.String(), lim.String())
	}
	soft := cfg.Server.MemoryLimit
	if soft == 0 {
		soft = config.DerivedMemoryLimit(cfg.Cache.MaxBytes, len(cfg.Keys))
	}
	if soft >= lim.Value() {
		t.Errorf("Go soft memory limit %d is not below the container limit %d", soft, lim.Value())
	}
	if cpu := c.Resources.Requests[corev1.ResourceCPU]; cpu.IsZero() {
		t.Error("no CPU request")
	}

	// The restricted Pod Security Standard, as admission evaluates it.
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range eval.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec) {
		if !res.Allowed {
			t.Errorf("pod security restricted: %s: %s", res.ForbiddenReason, res.ForbiddenDetail)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("root filesystem not read-only")
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Error("the service account token is mounted; trendgate never calls the Kubernetes API")
	}

	// Selection: the Deployment, Service and PDB select the pods.
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if pod.Labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if !matches(d.Spec.Selector.MatchLabels) {
		t.Errorf("Deployment selector %v does not match the pod labels %v", d.Spec.Selector.MatchLabels, pod.Labels)
	}
	svc := r.services[0]
	if !matches(svc.Spec.Selector) {
		t.Errorf("Service selector %v does not match the pod labels", svc.Spec.Selector)
	}
	svcPorts := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		if _, ok := containerPort(c, p.TargetPort); !ok {
			t.Errorf("Service port %s targets %s, which the container does not have", p.Name, p.TargetPort.String())
		}
		svcPorts[p.Name] = true
	}
	if !svcPorts["http"] || !svcPorts["admin"] {
		t.Errorf("Service ports %v: want http and admin", svcPorts)
	}
	pdb := r.pdbs[0]
	if pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget selector does not match the pod labels")
	}
	if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
		t.Error("PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
	if grace := pod.Spec.TerminationGracePeriodSeconds; grace == nil || time.Duration(*grace)*time.Second <= cfg.Server.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %v: want more than server.shutdown_timeout %s", grace, cfg.Server.ShutdownTimeout)
	}
	if _, ok := pod.Annotations["checksum/secret"]; !ok {
		t.Error("no checksum/secret annotation: a changed Secret would not roll the pods")
	}
}

// podEnv returns the environment the container gets from its envFrom
// Secrets and its env values. A Secret the chart does not render
// (existingSecret) gives every TRENDGATE_ variable the config refers to a
// placeholder, as the operator's Secret must hold them.
func podEnv(t *testing.T, c corev1.Container, r rendered) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, src := range c.EnvFrom {
		if src.SecretRef == nil {
			t.Errorf("envFrom %+v: only Secrets are expected", src)
			continue
		}
		s, ok := r.secrets[src.SecretRef.Name]
		if !ok {
			for _, name := range []string{"TRENDGATE_UPSTREAM_KEY", "TRENDGATE_ADMIN_TOKEN", "TRENDGATE_REDIS_URL"} {
				env[name] = "placeholder-from-" + src.SecretRef.Name
			}
			env["TRENDGATE_REDIS_URL"] = "redis://redis:6379/0"
			continue
		}
		for k, v := range s.StringData {
			env[k] = v
		}
		for k, v := range s.Data {
			env[k] = string(v)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Errorf("env %s: valueFrom is not expected", e.Name)
		}
		env[e.Name] = e.Value
	}
	return env
}

// TestHelmRefuses: the chart refuses to render without the credentials
// and with several replicas but no cluster mode, saying why.
func TestHelmRefuses(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no credentials", nil, "secrets.upstreamKey is required"},
		{"no admin token", []string{"--set", "secrets.upstreamKey=u"}, "secrets.adminToken is required"},
		{"replicas without cluster mode", []string{"--set", "secrets.upstreamKey=u,secrets.adminToken=a,replicaCount=2"}, "replicaCount > 1 needs clusterMode"},
		{"cluster mode without redis", []string{"--set", "secrets.upstreamKey=u,secrets.adminToken=a,clusterMode=true"}, "secrets.redisURL is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runHelm(t, append([]string{"template", "tg", chartDir}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v; want an error saying %q", err, tc.want)
			}
		})
	}
}
