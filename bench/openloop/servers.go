package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
	"time"

	"trendgate/auth"
)

// nginxConf is the reference nginx configuration; see the file's comments.
//
//go:embed nginx.conf.tmpl
var nginxConf string

var nginxTemplate = template.Must(template.New("nginx.conf").Parse(nginxConf))

// gatewayTemplate is trendgate's configuration for the bench: one key on a
// plan without limits or quotas, access log off (as nginx's), long TTLs so
// that every measured request is a hit, pprof on the admin listener.
var gatewayTemplate = template.Must(template.New("trendgate.yaml").Parse(`server:
  listen: {{.Listen}}
{{- if .Loops}}
  event_loops: {{.Loops}}
{{- end}}
admin:
  listen: {{.Admin}}
  pprof: true
log:
  level: warn
  access: false
upstream:
  base_url: {{.Upstream}}
  api_key: {{.UpstreamKey}}
{{- if .CertFile}}
tls:
  mode: files
  cert_file: {{.CertFile}}
  key_file: {{.KeyFile}}
  http_listen: {{.HTTPListen}}
  hsts_max_age: 0s
{{- end}}
cache:
  ttl:
    list: 60m
    series_hour_max: 60m
plans:
  bench:
    per_second: 0
    endpoints: [list, series]
    data_mode: full
keys:
  - id: bench
    sha256: {{.KeyDigest}}
    plan: bench
`))

// process is a child process this bench started and stops.
type process struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    string // file holding its stdout and stderr
}

// start runs name's command with its output in dir/name.log. The child gets
// SIGKILL if this process dies first, so nothing outlives the bench.
func start(dir, name string, argv ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// pid is the process id whose CPU time counts for this process (nginx adds
// its workers, see procCPU).
func (p *process) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and, after 10 s, SIGKILL; it waits for the exit.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tail returns the last lines of the process's log, for error messages.
func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}

// waitReady polls url until it answers (any status) or the process exits.
func (p *process) waitReady(ctx context.Context, client *http.Client, url string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during start:\n%s", p.name, p.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer %s within 20s:\n%s", p.name, url, p.tail())
		}
	}
}

// freeAddr returns a loopback address that was free a moment ago (the child
// binds it next; a collision makes its start fail, it cannot mismeasure).
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// freeAddrs returns n addresses from freeAddr.
func freeAddrs(n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

// writeCert writes a fresh self-signed ECDSA P-256 certificate for
// 127.0.0.1 to dir and returns the file paths and a pool that trusts it.
func writeCert(dir string) (certFile, keyFile string, pool *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, fmt.Errorf("certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", "", nil, err
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool, nil
}

// server is one contender: its plain and TLS base URLs and the processes
// whose CPU time it is charged.
type server struct {
	name       string
	plainURL   string // http://127.0.0.1:P
	tlsURL     string // https://127.0.0.1:P (HTTP/1.1 and HTTP/2 by ALPN)
	procs      []*process
	tlsAdmin   string // the HTTPS process's admin listener (/metrics); "" for nginx
	plainAdmin string // the plain-HTTP process's admin listener; "" for nginx
	pprof      bool   // the admin listeners serve /debug/pprof (trendgate, minimal)
}

// baseURL is the URL requests of protocol pr go to.
func (s *server) baseURL(pr protocol) string {
	if pr == h1 {
		return s.plainURL
	}
	return s.tlsURL
}

// serves reports whether s speaks pr: the minimal server has no HTTP/2,
// and minimal-epoll, which differs from it on plain HTTP/1.1 only,
// serves plain HTTP/1.1 only.
func (s *server) serves(pr protocol) bool {
	switch {
	case s.name == "minimal-epoll":
		return pr == h1
	case strings.HasPrefix(s.name, "minimal"):
		return pr != h2
	}
	return true
}

// admin is the admin listener of the process serving pr ("" for nginx).
func (s *server) admin(pr protocol) string {
	if pr == h1 {
		return s.plainAdmin
	}
	return s.tlsAdmin
}

// pids returns the processes serving pr: trendgate runs one process per
// listener kind, nginx one master for all (whose workers procCPU adds), the
// minimal server one process.
func (s *server) pids(pr protocol) []int {
	if pr == h1 || len(s.procs) == 1 {
		return []int{s.procs[0].pid()}
	}
	return []int{s.procs[1].pid()}
}

func (s *server) stop() {
	for _, p := range s.procs {
		p.stop()
	}
}

// env is everything the contenders share: the work directory, the upstream,
// the certificate and the keys.
type env struct {
	dir               string
	upstreamURL       string
	upstreamKey       string
	clientKey         string
	certFile, keyFile string
	pool              *x509.CertPool
	probe             *http.Client
}

// startUpstream runs `trendgate demo-upstream` in its own process, so its
// CPU time is no contender's.
func startUpstream(ctx context.Context, e *env, bin string) (*process, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := start(e.dir, "upstream", bin, "demo-upstream", "-listen", addr, "-api-key", e.upstreamKey)
	if err != nil {
		return nil, err
	}
	e.upstreamURL = "http://" + addr
	if err := p.waitReady(ctx, e.probe, e.upstreamURL+"/_demo/"); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// startTrendgate runs two `trendgate serve` processes from generated
// configs: one plain HTTP, one HTTPS (HTTP/1.1 and HTTP/2 lanes), as the
// contender called name. loops, when set, is both ones'
// server.event_loops ("0": a goroutine per connection); "" keeps the
// default.
func startTrendgate(ctx context.Context, e *env, name, bin, loops string) (*server, error) {
	s := &server{name: name, pprof: true}
	for _, tls := range []bool{false, true} {
		addrs, err := freeAddrs(3)
		if err != nil {
			return nil, err
		}
		fields := map[string]string{
			"Listen": addrs[0], "Admin": addrs[1], "HTTPListen": addrs[2],
			"Upstream": e.upstreamURL, "UpstreamKey": e.upstreamKey, "KeyDigest": auth.Digest(e.clientKey),
		}
		proc := name + "-plain"
		if loops != "" {
			fields["Loops"] = loops
		}
		if tls {
			proc = name + "-tls"
			fields["CertFile"], fields["KeyFile"] = e.certFile, e.keyFile
		}
		var cfg bytes.Buffer
		if err := gatewayTemplate.Execute(&cfg, fields); err != nil {
			return nil, err
		}
		path := filepath.Join(e.dir, proc+".yaml")
		if err := os.WriteFile(path, cfg.Bytes(), 0o600); err != nil {
			return nil, err
		}
		p, err := start(e.dir, proc, bin, "serve", "-config", path, "-watch", "0")
		if err != nil {
			s.stop()
			return nil, err
		}
		s.procs = append(s.procs, p)
		admin := "http://" + addrs[1]
		if err := p.waitReady(ctx, e.probe, admin+"/healthz"); err != nil {
			s.stop()
			return nil, err
		}
		if tls {
			s.tlsURL, s.tlsAdmin = "https://"+addrs[0], admin
		} else {
			s.plainURL, s.plainAdmin = "http://"+addrs[0], admin
		}
	}
	return s, nil
}

// errNoNginx says how to get nginx; the bench can still run trendgate alone.
var errNoNginx = errors.New("nginx is not installed (Debian/Ubuntu: apt-get install -y nginx); " +
	"install it, point -nginx at it, or measure trendgate alone with -servers trendgate")

// findNginx returns the nginx binary: path if set, else nginx on PATH or in
// /usr/sbin (where Debian puts it, often not on a user's PATH).
func findNginx(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx", nil
	}
	return "", errNoNginx
}

// startNginx writes the reference config into dir/nginx and starts nginx.
func startNginx(ctx context.Context, e *env, bin string, workers int) (*server, error) {
	dir := filepath.Join(e.dir, "nginx")
	for _, d := range []string{"cache", "tmp"} {
		// nginx's workers run as an unprivileged user when the bench is root:
		// they must be able to write the cache and temporary files.
		if err := os.MkdirAll(filepath.Join(dir, d), 0o777); err != nil {
			return nil, err
		}
		if err := os.Chmod(filepath.Join(dir, d), 0o777); err != nil {
			return nil, err
		}
	}
	addrs, err := freeAddrs(2)
	if err != nil {
		return nil, err
	}
	var cfg bytes.Buffer
	err = nginxTemplate.Execute(&cfg, map[string]any{
		"Workers": workers, "Dir": dir, "Plain": addrs[0], "TLS": addrs[1],
		"CertFile": e.certFile, "KeyFile": e.keyFile, "ClientKey": e.clientKey,
		"UpstreamKey": e.upstreamKey, "Upstream": strings.TrimPrefix(e.upstreamURL, "http://"),
	})
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, cfg.Bytes(), 0o644); err != nil {
		return nil, err
	}
	p, err := start(e.dir, "nginx", bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	if err != nil {
		return nil, err
	}
	s := &server{name: "nginx", plainURL: "http://" + addrs[0], tlsURL: "https://" + addrs[1], procs: []*process{p}}
	if err := p.waitReady(ctx, e.probe, s.plainURL+"/"); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		s.stop()
		return nil, fmt.Errorf("%w\nerror.log: %s", err, b)
	}
	return s, nil
}
