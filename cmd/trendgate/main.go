// Command trendgate is a caching API gateway for the social-topic analytics
// API. Run it without arguments for demo mode; see -help for the rest.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/internal/redislog"
	"trendgate/proxy"
)

const usage = `trendgate — a caching API gateway for the social-topic analytics API

Usage:
  trendgate [-listen ADDR] [-admin ADDR]     demo mode: gateway on an embedded demo upstream,
                                             with freshly generated full and limited keys
  trendgate serve -config FILE               run with a configuration file
  trendgate config check FILE                validate a configuration file
  trendgate keys new -id ID -plan PLAN       generate a key; prints the secret once and the
                                             config lines to paste
  trendgate keys hash                        read a key on stdin, print its sha256 digest
  trendgate demo-upstream -listen ADDR       run the demo upstream alone (see its -help)
  trendgate healthcheck [-url URL]           exit 0 when URL (default the admin /healthz)
                                             answers 200; for container health checks

Signals (serve): SIGHUP reloads the config file (it is also polled for
changes); SIGINT/SIGTERM drain in-flight requests and stop.

Memory: the Go soft memory limit is GOMEMLIMIT when set, else
server.memory_limit, else cache.max_bytes + max_bytes/4 + 32 MiB; the
"memory limit" log line at start says which.
`

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "trendgate:", err)
		}
		os.Exit(exitCode(err))
	}
}

func exitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 1
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fmt.Fprint(stdout, usage)
			return nil
		}
		return runDemo(args, stdout, stderr)
	}
	switch args[0] {
	case "serve":
		return runServe(args[1:], stderr)
	case "config":
		if len(args) != 3 || args[1] != "check" {
			return errors.New("usage: trendgate config check FILE")
		}
		return checkConfig(args[2], stdout)
	case "keys":
		return runKeys(args[1:], stdin, stdout)
	case "demo-upstream":
		return runDemoUpstream(args[1:], stderr)
	case "healthcheck":
		return runHealthcheck(args[1:])
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q (try trendgate -help)", args[0])
}

// newLogger returns a JSON logger to w at the given level. Output is
// buffered (flushed every second, when 256 KiB are pending, and by the
// returned stop) so the access log costs no write syscall per request.
func newLogger(level string, w io.Writer) (log *zap.Logger, stop func(), err error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	ws := &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(w), Size: 256 << 10, FlushInterval: time.Second}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), ws, lvl)
	log = zap.New(core)
	redislog.Install(redislog.New(log)) // go-redis's own lines become JSON too
	return log, func() { _ = ws.Stop() }, nil
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runServe(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := fs.String("config", "", "configuration `FILE` (required)")
	poll := fs.Duration("watch", 2*time.Second, "how often to check the config file for changes (0: only on SIGHUP)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("serve: -config FILE is required")
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	log, stopLog, err := newLogger(cfg.Log.Level, stderr)
	if err != nil {
		return err
	}
	defer stopLog()
	for _, w := range cfg.Warnings() {
		log.Warn("config: " + w)
	}
	setMemoryLimit(cfg, os.Getenv, log)

	g, err := proxy.New(cfg, proxy.Options{Logger: log})
	if err != nil {
		return err
	}
	defer func() { _ = g.Close() }()

	ctx, stop := signalContext()
	defer stop()
	w := config.NewWatcher(*path, *poll, log.Named("config"), func(c *config.Config, err error) {
		if err == nil {
			err = g.Reload(c)
		}
		if err != nil {
			log.Error("config reload refused; the previous config keeps serving", zap.Error(err))
			return
		}
		log.Info("config reloaded", zap.Int("keys", len(c.Keys)), zap.Int("plans", len(c.Plans)))
	})
	go w.Run(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				w.Trigger()
			}
		}
	}()
	return g.Run(ctx)
}

func checkConfig(path string, stdout io.Writer) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stdout, "%s: warning: %s\n", path, w)
	}
	fmt.Fprintf(stdout, "%s: ok (%d plans, %d keys, cluster mode %v)\n", path, len(cfg.Plans), len(cfg.Keys), cfg.ClusterMode())
	return nil
}

func runKeys(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: trendgate keys new -id ID -plan PLAN | trendgate keys hash")
	}
	switch args[0] {
	case "new":
		fs := flag.NewFlagSet("keys new", flag.ContinueOnError)
		id := fs.String("id", "", "key `ID` shown in logs and metrics (required)")
		plan := fs.String("plan", "", "`PLAN` name (required)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *id == "" || *plan == "" {
			return errors.New("keys new: -id and -plan are required")
		}
		secret, err := auth.Generate()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "secret: %s\n", secret)
		fmt.Fprintf(stdout, "# The secret is shown only this once. Paste these lines under keys: in the config:\n")
		fmt.Fprintf(stdout, "  - id: %s\n    sha256: %s\n    plan: %s\n", *id, auth.Digest(secret), *plan)
		return nil
	case "hash":
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		secret := strings.TrimRight(line, "\r\n")
		if err := auth.CheckFormat(secret); err != nil {
			return errors.New("keys hash: stdin does not hold a trendgate key (tg_...)")
		}
		fmt.Fprintln(stdout, auth.Digest(secret))
		return nil
	}
	return fmt.Errorf("keys: unknown subcommand %q", args[0])
}

// runDemo runs the gateway in front of an in-process demo upstream with two
// freshly generated keys.
func runDemo(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("trendgate", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "public listen `ADDR`")
	admin := fs.String("admin", "off", "admin listen `ADDR` (/healthz, /readyz, /metrics, /purge), or off")
	latency := fs.Duration("upstream-latency", 150*time.Millisecond, "latency the demo upstream adds to every answer")
	logLevel := fs.String("log-level", "info", "log `LEVEL`: debug, info, warn, error")
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage, "\nDemo mode flags:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, stopLog, err := newLogger(*logLevel, stderr)
	if err != nil {
		return err
	}
	defer stopLog()

	upstreamKey, err := auth.Generate() // the gateway's own upstream credential, for this run only
	if err != nil {
		return err
	}
	up, err := demo.New(demo.Options{APIKey: upstreamKey, Latency: *latency})
	if err != nil {
		return err
	}
	defer up.Close()
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	upSrv := &http.Server{Handler: up, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = upSrv.Serve(upLn) }()
	defer func() { _ = upSrv.Close() }()

	cfg := config.Default()
	cfg.Server.Listen = *listen
	cfg.Admin.Listen = *admin
	cfg.Log.Level = *logLevel
	setMemoryLimit(cfg, os.Getenv, log)
	cfg.Upstream.BaseURL = "http://" + upLn.Addr().String()
	cfg.Upstream.APIKey = upstreamKey
	keys := map[string]string{}
	for _, plan := range []string{"full", "limited"} {
		secret, err := auth.Generate()
		if err != nil {
			return err
		}
		keys[plan] = secret
		cfg.Keys = append(cfg.Keys, config.Key{ID: "demo-" + plan, SHA256: auth.Digest(secret), Plan: plan})
	}
	g, err := proxy.New(cfg, proxy.Options{Logger: log})
	if err != nil {
		return err
	}
	defer func() { _ = g.Close() }()
	ls, err := g.Listen()
	if err != nil {
		return err
	}
	printDemo(stdout, "http://"+ls.Public.Addr().String(), keys["full"], keys["limited"])

	ctx, stop := signalContext()
	defer stop()
	return g.Serve(ctx, ls)
}

func printDemo(w io.Writer, base, full, limited string) {
	fmt.Fprintf(w, "full key: %s\n", full)
	fmt.Fprintf(w, "limited key: %s\n", limited)
	fmt.Fprintf(w, "\ntrendgate demo mode: gateway on %s in front of an embedded demo upstream. Try:\n\n", base)
	paths := []string{
		"/api4/public/topics/list/v1",
		"/api4/public/topic/bitcoin/whatsup/v1",
		"/api4/public/topic/bitcoin/time-series/v1",
		"/api4/public/topic/%23ai/time-series/v1?bucket=day&interval=1m",
		"/api4/public/topic/ai%20agents/time-series/v1",
		"/topic/bitcoin/time-series/interactions.tsv",
	}
	for _, p := range paths {
		fmt.Fprintf(w, "curl -i -H 'Authorization: Bearer %s' '%s%s'\n", full, base, p)
	}
	fmt.Fprintf(w, "\n# the limited plan drops fields (compare with the full key):\n")
	fmt.Fprintf(w, "curl -i -H 'Authorization: Bearer %s' '%s/api4/public/topic/bitcoin/time-series/v1'\n", limited, base)
	fmt.Fprintf(w, "\nCtrl-C stops it.\n")
}

func runDemoUpstream(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo-upstream", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:18080", "listen `ADDR`")
	seed := fs.Int64("seed", 1, "data seed")
	topics := fs.Int("topics", 300, "size of the topics list")
	latency := fs.Duration("latency", 0, "added latency per answer")
	perMinute := fs.Int("per-minute", 0, "account requests per minute before 429 (0: unlimited)")
	perDay := fs.Int("per-day", 0, "account requests per day before 429 (0: unlimited)")
	apiKey := fs.String("api-key", "", "require 'Authorization: Bearer `KEY`' (default: any caller)")
	notFound := fs.Bool("unknown-404", false, "answer unknown topics with 404 instead of empty data")
	fault := fs.String("fault", "none", "start with this failure mode: none, 5xx, 429, garbage, wrong-shape, oversize, hang, flap, reset")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := demo.ParseFault(*fault)
	if err != nil {
		return err
	}
	up, err := demo.New(demo.Options{Seed: *seed, Topics: *topics, Latency: *latency, PerMinute: *perMinute,
		PerDay: *perDay, APIKey: *apiKey, UnknownTopic404: *notFound, Control: true})
	if err != nil {
		return err
	}
	defer up.Close()
	up.SetFault(f)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "demo upstream on http://%s (control routes under /_demo/)\n", ln.Addr())
	srv := &http.Server{Handler: up, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signalContext()
	defer stop()
	go func() {
		<-ctx.Done()
		up.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func runHealthcheck(args []string) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:9090/healthz", "`URL` to probe")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(*url)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s", *url, resp.Status)
	}
	return nil
}
