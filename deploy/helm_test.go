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
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	statefulSets    []*appsv1.StatefulSet
	services        []*corev1.Service
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	ingresses       []*networkingv1.Ingress
	networkPolicies []*networkingv1.NetworkPolicy
	serviceMonitors []*serviceMonitor
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) the chart renders; decoding is strict, so a
// field outside it (a typo) fails the test. Its field names and types are
// the CRD's.
type serviceMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			Authorization struct {
				Type        string                   `json:"type"`
				Credentials corev1.SecretKeySelector `json:"credentials"`
			} `json:"authorization"`
		} `json:"endpoints"`
	} `json:"spec"`
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
		case "apps/v1 StatefulSet":
			d := &appsv1.StatefulSet{}
			r.statefulSets, obj = append(r.statefulSets, d), d
		case "autoscaling/v2 HorizontalPodAutoscaler":
			h := &autoscalingv2.HorizontalPodAutoscaler{}
			r.hpas, obj = append(r.hpas, h), h
		case "networking.k8s.io/v1 Ingress":
			i := &networkingv1.Ingress{}
			r.ingresses, obj = append(r.ingresses, i), i
		case "networking.k8s.io/v1 NetworkPolicy":
			n := &networkingv1.NetworkPolicy{}
			r.networkPolicies, obj = append(r.networkPolicies, n), n
		case "monitoring.coreos.com/v1 ServiceMonitor":
			m := &serviceMonitor{}
			r.serviceMonitors, obj = append(r.serviceMonitors, m), m
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
	if len(r.statefulSets) != 1 || len(r.services) != 2 || len(r.configMaps) != 1 || len(r.pdbs) != 1 {
		t.Fatalf("want one StatefulSet, two Services (the API's and the pods' headless one), one ConfigMap and one PodDisruptionBudget; got %d, %d, %d, %d",
			len(r.statefulSets), len(r.services), len(r.configMaps), len(r.pdbs))
	}
	d := r.statefulSets[0]
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
	n := int32(1)
	if d.Spec.Replicas != nil {
		n = *d.Spec.Replicas
	}
	for _, h := range r.hpas {
		n = max(n, *h.Spec.MinReplicas)
	}
	if n > 1 {
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

	// Memory: the sizing rule (docs/operations.md), 1.25 x cache.max_bytes + 48 MiB
	// + 1 KiB per key, as request and limit, above the Go soft limit trendgate sets.
	rule := cfg.Cache.MaxBytes + cfg.Cache.MaxBytes/4 + 48<<20 + int64(len(cfg.Keys))<<10
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
		t.Errorf("StatefulSet selector %v does not match the pod labels %v", d.Spec.Selector.MatchLabels, pod.Labels)
	}
	var svc, headless *corev1.Service
	for _, s := range r.services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = s
		} else {
			svc = s
		}
	}
	if svc == nil || headless == nil {
		t.Fatal("want the API's Service and the pods' headless Service")
	}
	if headless.Name != d.Spec.ServiceName || !matches(headless.Spec.Selector) {
		t.Errorf("StatefulSet serviceName %q: want the headless Service %q, selecting the pods", d.Spec.ServiceName, headless.Name)
	}
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
	checkStopping(t, pod, c, cfg)
	checkExtras(t, r, d, svc, matches)
	if _, ok := pod.Annotations["checksum/secret"]; !ok {
		t.Error("no checksum/secret annotation: a changed Secret would not roll the pods")
	}
}

// checkStopping checks what outlives a pod and how it stops: the state
// files on the data volume (a claim of the StatefulSet's, or an emptyDir
// with persistence off), mounted writable, the config's safe setup
// (checkSafe) within terminationGracePeriodSeconds, and a shutdown delay at
// least as long as the readiness probe takes to fail (for whatever routes
// by it rather than by the pod's deletion).
func checkStopping(t *testing.T, pod corev1.PodTemplateSpec, c corev1.Container, cfg *config.Config) {
	t.Helper()
	var dirs []string
	for _, vm := range c.VolumeMounts {
		if vm.Name == "data" && !vm.ReadOnly {
			dirs = append(dirs, vm.MountPath)
		}
	}
	if len(dirs) != 1 {
		t.Errorf("want the data volume mounted writable once; got %v", c.VolumeMounts)
	}
	grace := time.Duration(0)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	checkSafe(t, cfg, dirs, grace)
	if p := c.ReadinessProbe; p != nil {
		if fail := time.Duration(p.PeriodSeconds*p.FailureThreshold) * time.Second; cfg.Server.ShutdownDelay < fail {
			t.Errorf("server.shutdown_delay %v is shorter than the readiness probe takes to fail (%v)", cfg.Server.ShutdownDelay, fail)
		}
	}
}

// checkExtras checks the objects behind values: the data volume's claim,
// the ServiceMonitor, Ingress, NetworkPolicy and HorizontalPodAutoscaler,
// each against the StatefulSet and the API's Service (svc).
func checkExtras(t *testing.T, r rendered, d *appsv1.StatefulSet, svc *corev1.Service, matches func(map[string]string) bool) {
	t.Helper()
	pod := d.Spec.Template.Spec
	claimed := false
	for _, tpl := range d.Spec.VolumeClaimTemplates {
		if tpl.Name == "data" {
			claimed = true
			if st := tpl.Spec.Resources.Requests[corev1.ResourceStorage]; st.IsZero() {
				t.Error("the data claim requests no storage")
			}
		}
	}
	emptyDir := false
	for _, v := range pod.Volumes {
		if v.Name == "data" {
			emptyDir = v.EmptyDir != nil
		}
	}
	if claimed == emptyDir {
		t.Errorf("the data volume: want either a volumeClaimTemplate (persistence) or an emptyDir; claim %v, emptyDir %v", claimed, emptyDir)
	}

	svcPort := func(name string) bool {
		for _, p := range svc.Spec.Ports {
			if p.Name == name {
				return true
			}
		}
		return false
	}
	for _, m := range r.serviceMonitors {
		selected := 0
		for _, s := range r.services {
			ok := len(m.Spec.Selector.MatchLabels) > 0
			for k, v := range m.Spec.Selector.MatchLabels {
				ok = ok && s.Labels[k] == v
			}
			if ok {
				selected++
				if s != svc {
					t.Errorf("ServiceMonitor selects Service %s; want only the API's %s (every pod would be scraped twice)", s.Name, svc.Name)
				}
			}
		}
		if selected == 0 {
			t.Errorf("ServiceMonitor selects no Service (labels %v)", m.Spec.Selector.MatchLabels)
		}
		if len(m.Spec.Endpoints) != 1 {
			t.Fatalf("ServiceMonitor: want one endpoint, got %d", len(m.Spec.Endpoints))
		}
		e := m.Spec.Endpoints[0]
		if e.Port != "admin" || !svcPort(e.Port) || e.Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoint %s %s: want port admin, /metrics", e.Port, e.Path)
		}
		secret := pod.Containers[0].EnvFrom[0].SecretRef.Name
		if cr := e.Authorization.Credentials; e.Authorization.Type != "Bearer" || cr.Name != secret || cr.Key != "TRENDGATE_ADMIN_TOKEN" {
			t.Errorf("ServiceMonitor authorization %+v: want Bearer with %s's TRENDGATE_ADMIN_TOKEN", e.Authorization, secret)
		}
		for _, dur := range []string{e.Interval, e.ScrapeTimeout} {
			if _, err := time.ParseDuration(dur); err != nil {
				t.Errorf("ServiceMonitor duration %q: %v", dur, err)
			}
		}
	}
	for _, ing := range r.ingresses {
		if len(ing.Spec.Rules) == 0 {
			t.Error("Ingress without rules")
		}
		for _, rule := range ing.Spec.Rules {
			for _, p := range rule.HTTP.Paths {
				b := p.Backend.Service
				if b == nil || b.Name != svc.Name || b.Port.Name != "http" || !svcPort(b.Port.Name) {
					t.Errorf("Ingress path %s: backend %+v; want the API Service's http port (never admin)", p.Path, b)
				}
			}
		}
	}
	for _, np := range r.networkPolicies {
		if !matches(np.Spec.PodSelector.MatchLabels) {
			t.Error("NetworkPolicy does not select the pods")
		}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port != nil && p.Port.String() == "admin" && len(rule.From) == 0 {
					t.Error("NetworkPolicy opens the admin port to everyone")
				}
			}
		}
	}
	for _, h := range r.hpas {
		if ref := h.Spec.ScaleTargetRef; ref.Kind != "StatefulSet" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
			t.Errorf("HorizontalPodAutoscaler targets %+v; want the StatefulSet %s", ref, d.Name)
		}
		if d.Spec.Replicas != nil {
			t.Error("the StatefulSet sets replicas while an HPA scales it: every upgrade would reset the count")
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
			t.Errorf("HorizontalPodAutoscaler min %v max %d", h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
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
		{"autoscaling without cluster mode", []string{"--set", "secrets.upstreamKey=u,secrets.adminToken=a,autoscaling.enabled=true"}, "autoscaling.enabled needs clusterMode"},
		{"ingress without hosts", []string{"--set", "secrets.upstreamKey=u,secrets.adminToken=a,ingress.enabled=true"}, "ingress.enabled needs at least one entry in ingress.hosts"},
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

// TestHelmDefaults: with the default values (and the two credentials the
// chart requires) the pod keeps its state on a persistent volume claimed
// by the StatefulSet, mounted into the pod, and stops within a grace
// period that covers the shutdown delay and the drain; a ServiceMonitor
// is rendered with serviceMonitor.enabled=true only.
func TestHelmDefaults(t *testing.T) {
	const creds = "secrets.upstreamKey=u,secrets.adminToken=a"
	for _, tc := range []struct {
		set      string
		monitors int
	}{{creds, 0}, {creds + ",serviceMonitor.enabled=true", 1}} {
		t.Run(tc.set, func(t *testing.T) {
			out, err := runHelm(t, "template", "tg", chartDir, "--set", tc.set)
			if err != nil {
				t.Fatal(err)
			}
			r := decodeManifests(t, out)
			checkRendered(t, r)
			d := r.statefulSets[0]
			if len(d.Spec.VolumeClaimTemplates) != 1 || d.Spec.VolumeClaimTemplates[0].Name != "data" {
				t.Errorf("volumeClaimTemplates %v: want the data claim", d.Spec.VolumeClaimTemplates)
			}
			mounted := false
			for _, vm := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
				mounted = mounted || vm.Name == "data" && vm.MountPath == "/var/lib/trendgate"
			}
			if !mounted {
				t.Error("the data claim is not mounted at /var/lib/trendgate")
			}
			if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 40 {
				t.Errorf("terminationGracePeriodSeconds %v; want 40 (delay 10 + drain 20 + writes 10)", g)
			}
			if len(r.serviceMonitors) != tc.monitors {
				t.Errorf("%d ServiceMonitors; want %d", len(r.serviceMonitors), tc.monitors)
			}
		})
	}
}
