// Command trendgate is a caching API gateway for the social-topic analytics
// API. Run it without arguments for demo mode; see -help for the rest.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/internal/buildinfo"
	"trendgate/internal/redislog"
	"trendgate/keystore"
	"trendgate/tracing"
)

const usage = `trendgate — a caching API gateway for the social-topic analytics API

Usage:
  trendgate [flags]                          demo mode: gateway on an embedded demo upstream,
                                             with freshly generated full and limited keys
                                             (flags below)
  trendgate serve [-config] FILE             run with a configuration file
  trendgate config check [-config] FILE      validate a configuration file (every problem,
                                             with its YAML path or line)
  trendgate keys new -id ID -plan PLAN       generate a key (or -account ACCOUNT instead of
                                             -plan); prints the secret once and the config
                                             lines to paste
  trendgate keys hash                        read a key on stdin, print its sha256 digest
  trendgate keys usage [-config FILE | -admin ADDR] [-id ID | -account ID] [-state STATE] [-json]
                                             per-key quota, bucket and 24 h traffic from the
                                             admin listener (address and token from FILE's
                                             admin section; $TRENDGATE_ADMIN_TOKEN overrides)
  trendgate keys create|rotate|revoke [-config FILE | -admin ADDR] -id ID ...
                                             change keys through the running gateway's key
                                             API (see trendgate keys -help)
  trendgate accounts create|update|delete [-config FILE | -admin ADDR] -id ID ...
                                             make, change or delete an account through the
                                             running gateway's key API (see accounts -help)
  trendgate state check|reset [-config] FILE check the state file of state.path, or move a
                                             damaged one aside so the next start begins at zero
  trendgate usage report -month YYYY-MM [-account ID] [-csv] [-config FILE | -admin ADDR]
                                             a month's usage history per account from the
                                             admin listener: tables, or its CSV export
  trendgate demo-upstream -listen ADDR       run the demo upstream alone (see its -help)
  trendgate healthcheck [-ready] [-config FILE|-url URL]
                                             exit 0 when the admin /healthz (liveness) or,
                                             with -ready, /readyz (readiness; false while
                                             draining) answers 200: the listener of the
                                             file's admin.listen, or URL. The probes need
                                             no admin token; for container health checks
  trendgate version                          print version, commit and Go version (also -version)

Signals (serve): SIGHUP reloads the config file and, in tls.mode files, the
certificate files (both are also polled for changes, every -watch);
SIGINT/SIGTERM turn /readyz to 503, keep serving for server.shutdown_delay
(a second signal skips the rest of it), then drain in-flight requests and stop.

Memory: the Go soft memory limit is GOMEMLIMIT when set, else
server.memory_limit, else cache.max_bytes + max_bytes/4 + 32 MiB + 1 KiB
per configured key; the "memory limit" log line at start says which.

Runtime: serve and demo mode run themselves again with schedtrace added to
GODEBUG, which keeps the Go runtime's monitor thread from sleeping deeply
between requests (less CPU per request; docs/performance.md). Set
GODEBUG=schedtrace=0 to keep the runtime's default; the "runtime monitor"
log line at start says which is in force.
`

func main() {
	if serves(os.Args[1:]) {
		if err := reexecWithSteadySysmon(); err != nil {
			fmt.Fprintln(os.Stderr, "trendgate:", err)
		}
	}
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
		if len(args) > 0 && (args[0] == "-version" || args[0] == "--version") {
			fmt.Fprintln(stdout, buildinfo.Read())
			return nil
		}
		return runDemo(args, stdout, stderr)
	}
	switch args[0] {
	case "serve":
		return runServe(args[1:], stdout, stderr)
	case "config":
		return runConfig(args[1:], stdout)
	case "keys":
		return runKeys(args[1:], stdin, stdout)
	case "accounts":
		return runAccounts(args[1:], stdout)
	case "state":
		return runState(args[1:], stdout)
	case "usage":
		return runUsage(args[1:], stdout)
	case "demo-upstream":
		return runDemoUpstream(args[1:], stdout, stderr)
	case "healthcheck":
		return runHealthcheck(args[1:], stdout)
	case "version":
		fmt.Fprintln(stdout, buildinfo.Read())
		return nil
	case "help":
		fmt.Fprint(stdout, usage, "\nDemo mode flags:\n")
		fs, _ := demoFlags(stdout)
		fs.PrintDefaults()
		return nil
	}
	return fmt.Errorf("unknown command %q (try trendgate -help)", args[0])
}

// parseFlags parses args into fs. A -h, -help or --help prints fs's usage
// to stdout (not as an error) and reports help; other errors go to stderr
// as usual.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (help bool, err error) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(stdout)
			fs.Usage()
			return true, nil
		}
	}
	return false, fs.Parse(args)
}

// newFlags returns a flag set whose usage is text followed by the flags.
func newFlags(name, text string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), text)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprint(fs.Output(), "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
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
	// Durations carry their unit ("1.25ms", "2m0s"), not bare seconds.
	enc.EncodeDuration = zapcore.StringDurationEncoder
	ws := &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(w), Size: 256 << 10, FlushInterval: time.Second}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), ws, lvl)
	log = zap.New(core)
	redislog.Install(redislog.New(log)) // go-redis's own lines become JSON too
	tracing.LogErrors(log)              // and the OpenTelemetry SDK's (failed exports)
	return log, func() { _ = ws.Stop() }, nil
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runServe(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("serve", "Usage: trendgate serve [-config] FILE [-watch 2s]\n\n"+
		"Run the gateway with a configuration file, given as -config FILE or as the argument.\n")
	flagPath := fs.String("config", "", "configuration `FILE` (or give it as the argument)")
	poll := fs.Duration("watch", 2*time.Second, "how often to check the config file, and in tls.mode files the certificate files, for changes (0: only on SIGHUP)")
	pos, help, err := parseArgs(fs, args, stdout)
	if help || err != nil {
		return err
	}
	path, err := configFile(*flagPath, pos, "trendgate serve [-config] FILE")
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	log, stopLog, err := newLogger(cfg.Log.Level, stderr)
	if err != nil {
		return err
	}
	defer stopLog()
	ctx, stop := signalContext()
	defer stop()
	defer logStopped(ctx, log, stopLog, time.Now(), &err)
	for _, w := range cfg.Warnings() {
		log.Warn("config: " + w)
	}
	setMemoryLimit(cfg, os.Getenv, log)
	tuneGC(ctx, cfg, os.Getenv, log)
	logSysmon(os.Getenv, log)

	certCheck := *poll
	if certCheck <= 0 {
		certCheck = -1 // only on SIGHUP, like the config file
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: log, CertCheckInterval: certCheck})
	if err != nil {
		return err
	}
	defer func() { _ = g.Close() }()
	releaseStartGarbage()

	w := config.NewWatcher(path, *poll, log.Named("config"), func(c *config.Config, err error) {
		if err != nil {
			g.RefuseReload(err) // counted and logged once, like a refusal by Reload
			return
		}
		_ = g.Reload(c) // logs what changed, or why it was refused
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
	// Registered here, before serving, so that it sees the first signal
	// as well as signalContext does.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	served := make(chan struct{})
	defer close(served)
	go skipDelayOnSecondSignal(g, sig, served)
	return g.Run(ctx)
}

// skipDelayOnSecondSignal calls g.SkipShutdownDelay on the second SIGINT
// or SIGTERM received on sig (the first begins the shutdown), until done
// is closed: an operator who presses Ctrl-C twice does not wait out
// server.shutdown_delay.
func skipDelayOnSecondSignal(g *gateway.Gateway, sig <-chan os.Signal, done <-chan struct{}) {
	for n := 0; ; {
		select {
		case <-done:
			return
		case <-sig:
			if n++; n == 2 {
				g.SkipShutdownDelay()
				return
			}
		}
	}
}

// logStopped writes the process's last log line, "stopped", with how long
// it ran and why it stops: the signal that ended ctx, the error *err holds,
// or a panic, which it logs with its stack and then lets go on (flushing
// the log first, since the panic ends the process before any other defer
// would). Deferred right after the logger exists, it runs after everything
// else the function deferred, so nothing is logged after it. A process
// killed outright (SIGKILL, the OOM killer) writes no such line: its
// absence says so. Panics on other goroutines end the process without
// passing here; the request handlers recover their own.
func logStopped(ctx context.Context, log *zap.Logger, flush func(), started time.Time, err *error) {
	uptime := zap.Duration("uptime", time.Since(started))
	if p := recover(); p != nil {
		log.Error("stopped", zap.String("reason", "panic"), zap.Any("panic", p), zap.StackSkip("stack", 1), uptime)
		flush()
		panic(p)
	}
	switch {
	case *err != nil:
		log.Error("stopped", zap.String("reason", "error"), zap.Error(*err), uptime)
	case ctx.Err() != nil:
		log.Info("stopped", zap.String("reason", context.Cause(ctx).Error()), uptime)
	default:
		log.Info("stopped", zap.String("reason", "done"), uptime)
	}
}

// runConfig runs "config check [-config] FILE".
func runConfig(args []string, stdout io.Writer) error {
	const use = "trendgate config check [-config] FILE"
	fs := newFlags("config check", "Usage: "+use+"\n\n"+
		"Validate a configuration file, given as -config FILE or as the argument: every\n"+
		"problem is printed with its YAML path (or its line, for a syntax mistake),\n"+
		"warnings too; the exit status is 0 only for a valid file whose state.path and\n"+
		"keys_file (when set) can be written: their directories must exist and be writable\n"+
		"by the user running the check.\n")
	flagPath := fs.String("config", "", "configuration `FILE` (or give it as the argument)")
	if len(args) == 0 || args[0] != "check" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fs.SetOutput(stdout)
			fs.Usage()
			return nil
		}
		return errors.New("usage: " + use + " (see trendgate config check -help)")
	}
	pos, help, err := parseArgs(fs, args[1:], stdout)
	if help || err != nil {
		return err
	}
	path, err := configFile(*flagPath, pos, use)
	if err != nil {
		return fmt.Errorf("config check: %w", err)
	}
	return checkConfig(path, stdout)
}

// parseArgs parses args into fs with flags and arguments in any order
// ("serve FILE -watch 1s" as well as "serve -watch 1s FILE"; the flag
// package alone stops at the first argument) and returns the arguments.
// help is parseFlags's.
func parseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) (pos []string, help bool, err error) {
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
		return nil, help, err
	}
	for fs.NArg() > 0 {
		rest := fs.Args()
		pos = append(pos, rest[0])
		if err := fs.Parse(rest[1:]); err != nil {
			return nil, false, err
		}
	}
	return pos, false, nil
}

// configFile returns the configuration file named by -config (flagPath)
// or by the one argument, which may both be given if they agree.
func configFile(flagPath string, pos []string, use string) (string, error) {
	switch {
	case len(pos) > 1:
		return "", fmt.Errorf("one configuration file, got %d arguments (usage: %s)", len(pos), use)
	case len(pos) == 1 && flagPath != "" && pos[0] != flagPath:
		return "", fmt.Errorf("-config %s and the argument %s name different files; give one (usage: %s)", flagPath, pos[0], use)
	case len(pos) == 1:
		return pos[0], nil
	case flagPath != "":
		return flagPath, nil
	}
	return "", fmt.Errorf("a configuration file is required (usage: %s)", use)
}

func checkConfig(path string, stdout io.Writer) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	failed, pathErr := checkWritablePaths(path, cfg)
	for _, w := range cfg.Warnings() {
		if !warningOf(w, failed) {
			fmt.Fprintf(stdout, "%s: warning: %s\n", path, w)
		}
	}
	if pathErr != nil {
		return pathErr
	}
	managed := 0
	if cfg.KeysFile != "" {
		// The key API's changes are laid over the file at start and at
		// every reload; changes that do not fit refuse both.
		d, err := keystore.Load(cfg.KeysFile)
		if err != nil {
			return err
		}
		if err := d.Apply(cfg).Validate(); err != nil {
			return fmt.Errorf("the key API's changes in keys_file %s (version %d) do not fit this file, so a start or reload would be refused: %w",
				cfg.KeysFile, d.Version, err)
		}
		managed = len(d.Keys)
	}
	fmt.Fprintf(stdout, "%s: ok (%d plans, %d keys, cluster mode %v)\n", path, len(cfg.Plans), len(cfg.Keys)+managed, cfg.ClusterMode())
	return nil
}

const keysUsage = `Usage:
  trendgate keys new -id ID -plan PLAN   generate a key (or -account ACCOUNT instead of
                                         -plan: a key of that account); prints the
                                         secret once and the config lines to paste
  trendgate keys hash                    read a key on stdin, print its sha256 digest
  trendgate keys usage [-config FILE | -admin ADDR] [-id ID | -account ID] [-state STATE] [-json]
                                         per-key usage from a running gateway's admin
                                         listener (address and token from FILE, or
                                         ADDR and $TRENDGATE_ADMIN_TOKEN)
  trendgate keys create [-config FILE | -admin ADDR] -id ID (-account ACCOUNT | -plan PLAN)
                        [-expires TIME] [-not-before TIME] [-json]
                                         create a key through the running gateway's key
                                         API; prints the secret once
  trendgate keys rotate [-config FILE | -admin ADDR] -id ID [-new-id ID] [-overlap 24h] [-json]
                                         a new key in the same account; the old one ends
                                         after the overlap
  trendgate keys revoke [-config FILE | -admin ADDR] -id ID
                                         refuse a key from now on, on every instance
`

func runKeys(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: trendgate keys new|hash|usage|create|rotate|revoke ... (see trendgate keys -help)")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, keysUsage)
		return nil
	case "new":
		fs := newFlags("keys new", "Usage: trendgate keys new -id ID (-plan PLAN | -account ACCOUNT)\n\n"+
			"Generate a key. The secret is printed once; the config keeps only its digest.\n"+
			"A key of an account takes the account's plan and shares its quotas (docs/accounts.md).\n")
		id := fs.String("id", "", "key `ID` shown in logs and metrics (required)")
		plan := fs.String("plan", "", "`PLAN` name, for a key that is an account of its own")
		account := fs.String("account", "", "`ACCOUNT` the key belongs to (instead of -plan)")
		if help, err := parseFlags(fs, args[1:], stdout); help || err != nil {
			return err
		}
		if *id == "" || (*plan == "") == (*account == "") {
			return errors.New("keys new: -id and one of -plan or -account are required")
		}
		if err := config.CheckName(*id); err != nil {
			return fmt.Errorf("keys new: -id: %w", err)
		}
		if *plan != "" {
			if err := config.CheckName(*plan); err != nil {
				return fmt.Errorf("keys new: -plan: %w", err)
			}
		} else if err := config.CheckName(*account); err != nil {
			return fmt.Errorf("keys new: -account: %w", err)
		}
		secret, err := auth.Generate()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "secret: %s\n", secret)
		fmt.Fprintf(stdout, "# The secret is shown only this once. Paste these lines under keys: in the config:\n")
		fmt.Fprintf(stdout, "  - id: %s\n    sha256: %s\n", *id, auth.Digest(secret))
		if *account != "" {
			fmt.Fprintf(stdout, "    account: %s\n", *account)
		} else {
			fmt.Fprintf(stdout, "    plan: %s\n", *plan)
		}
		fmt.Fprintf(stdout, "    created: %s\n", time.Now().UTC().Format(time.RFC3339))
		if _, builtin := config.Default().Plans[*plan]; *plan != "" && !builtin {
			fmt.Fprintf(stdout, "# Note: %q is not a built-in plan (those are full and limited): define it under plans: in the same file.\n", *plan)
		}
		return nil
	case "usage":
		return runKeysUsage(args[1:], stdout)
	case "create":
		return runKeysCreate(args[1:], stdout)
	case "rotate":
		return runKeysRotate(args[1:], stdout)
	case "revoke":
		return runKeysRevoke(args[1:], stdout)
	case "hash":
		fs := newFlags("keys hash", "Usage: trendgate keys hash < KEYFILE\n\n"+
			"Read a key (tg_...) on stdin and print its sha256 digest, for the config's keys: list.\n")
		if help, err := parseFlags(fs, args[1:], stdout); help || err != nil {
			return err
		}
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		secret := strings.TrimRight(line, "\r\n")
		if err := auth.CheckFormat(secret); err != nil {
			if auth.ReasonOf(err) == auth.ReasonChecksum {
				return errors.New("keys hash: stdin holds a tg_ key whose checksum does not match: it was mistyped or cut short")
			}
			return errors.New("keys hash: stdin does not hold a trendgate key (tg_...)")
		}
		fmt.Fprintln(stdout, auth.Digest(secret))
		return nil
	}
	return fmt.Errorf("keys: unknown subcommand %q (see trendgate keys -help)", args[0])
}

// runDemo runs the gateway in front of an in-process demo upstream with two
// freshly generated keys.
func runDemo(args []string, stdout, stderr io.Writer) (err error) {
	fs, o := demoFlags(stderr)
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
		return err
	}
	if o.admin != "off" && !config.LoopbackListen(o.admin) {
		return fmt.Errorf("-admin %s: demo mode serves the admin listener without a token, so only on loopback (such as 127.0.0.1:9090); "+
			"run trendgate serve with admin.token set to expose it", o.admin)
	}
	log, stopLog, err := newLogger(o.logLevel, stderr)
	if err != nil {
		return err
	}
	defer stopLog()
	ctx, stop := signalContext()
	defer stop()
	defer logStopped(ctx, log, stopLog, time.Now(), &err)

	upstreamKey, err := auth.Generate() // the gateway's own upstream credential, for this run only
	if err != nil {
		return err
	}
	up, err := demo.New(demo.Options{APIKey: upstreamKey, Latency: o.latency})
	if err != nil {
		return err
	}
	defer up.Close()
	upURL, stopUp, err := up.ServeLoopback()
	if err != nil {
		return err
	}
	defer stopUp()

	cfg := config.Default()
	cfg.Server.Listen = o.listen
	cfg.Admin.Listen = o.admin
	cfg.Log.Level = o.logLevel
	setMemoryLimit(cfg, os.Getenv, log)
	tuneGC(ctx, cfg, os.Getenv, log)
	logSysmon(os.Getenv, log)
	cfg.Upstream.BaseURL = upURL
	cfg.Upstream.APIKey = upstreamKey
	withExampleRoutes(cfg)
	keys := map[string]string{}
	for _, plan := range []string{"full", "limited"} {
		secret, err := auth.Generate()
		if err != nil {
			return err
		}
		keys[plan] = secret
		cfg.Keys = append(cfg.Keys, config.Key{ID: "demo-" + plan, SHA256: auth.Digest(secret), Plan: plan})
	}
	if o.admin != "off" {
		// The key API works in demo mode too; what it makes lasts this run.
		dir, err := os.MkdirTemp("", "trendgate-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.KeysFile = filepath.Join(dir, "keys.yaml")
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: log})
	if err != nil {
		return err
	}
	defer func() { _ = g.Close() }()
	ls, err := g.Listen()
	if err != nil {
		return err
	}
	adminURL := ""
	if ls.Admin != nil {
		adminURL = "http://" + ls.Admin.Addr().String()
	}
	printDemo(stdout, "http://"+ls.Public.Addr().String(), adminURL, keys["full"], keys["limited"])
	return g.Serve(ctx, ls)
}

// withExampleRoutes configures the routes of config.example.yaml, which
// the demo upstream serves, and adds them to the plans as the example does.
func withExampleRoutes(cfg *config.Config) {
	cfg.Routes = config.ExampleRoutes()
	for plan, routes := range config.ExamplePlanRoutes() {
		p := cfg.Plans[plan]
		p.Endpoints = append(p.Endpoints, routes...)
		cfg.Plans[plan] = p
	}
}

// demoOptions are demo mode's flags.
type demoOptions struct {
	listen, admin, logLevel string
	latency                 time.Duration
}

// demoFlags returns demo mode's flag set, whose usage (to out) is the
// whole command list followed by these flags, and the options it fills.
func demoFlags(out io.Writer) (*flag.FlagSet, *demoOptions) {
	o := &demoOptions{}
	fs := flag.NewFlagSet("trendgate", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "public listen `ADDR`")
	fs.StringVar(&o.admin, "admin", "off", "admin listen `ADDR` on loopback (dashboard at /, /keys, /healthz, /readyz, /metrics, /purge, /openapi.yaml), or off")
	fs.DurationVar(&o.latency, "upstream-latency", 150*time.Millisecond, "latency the demo upstream adds to every answer")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn, error")
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage, "\nDemo mode flags:\n"); fs.PrintDefaults() }
	return fs, o
}

// printDemo prints the demo keys and curl commands, and the dashboard's URL
// when adminURL (the admin listener's base URL) is not "".
func printDemo(w io.Writer, base, adminURL, full, limited string) {
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
		"/api4/public/coins/list/v1?sort=galaxy_score&limit=3", // a configured route (docs/routes.md)
		"/api4/public/topic/bitcoin/posts/v1",
	}
	for _, p := range paths {
		fmt.Fprintf(w, "curl -i -H 'Authorization: Bearer %s' '%s%s'\n", full, base, p)
	}
	fmt.Fprintf(w, "\n# the limited plan drops fields (compare with the full key):\n")
	fmt.Fprintf(w, "curl -i -H 'Authorization: Bearer %s' '%s/api4/public/topic/bitcoin/time-series/v1'\n", limited, base)
	fmt.Fprintf(w, "curl -i -H 'Authorization: Bearer %s' '%s/api4/public/coins/list/v1?sort=galaxy_score&limit=3'\n", limited, base)
	if adminURL != "" {
		fmt.Fprintf(w, "\ndashboard: %s/\nper-key usage: trendgate keys usage -admin %s\n", adminURL, adminURL)
		fmt.Fprintf(w, "a new key (kept for this run): trendgate keys create -admin %s -id my-key -plan full\n", adminURL)
	}
	fmt.Fprintf(w, "\nCtrl-C stops it.\n")
}

func runDemoUpstream(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo-upstream", "Usage: trendgate demo-upstream [flags]\n\n"+
		"Run the synthetic upstream alone, with its control routes (GET /_demo/ lists them).\n")
	listen := fs.String("listen", "127.0.0.1:18080", "listen `ADDR`")
	seed := fs.Int64("seed", 1, "data seed")
	topics := fs.Int("topics", 300, "size of the topics list")
	latency := fs.Duration("latency", 0, "added latency per answer")
	perMinute := fs.Int("per-minute", 0, "account requests per minute before 429 (0: unlimited)")
	perDay := fs.Int("per-day", 0, "account requests per day before 429 (0: unlimited)")
	apiKey := fs.String("api-key", "", "require 'Authorization: Bearer `KEY`' (default: any caller)")
	notFound := fs.Bool("unknown-404", false, "answer unknown topics with 404 instead of empty data")
	fault := fs.String("fault", "none", "start with this failure `MODE`: "+strings.Join(demo.FaultNames(), ", "))
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
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

func runHealthcheck(args []string, stdout io.Writer) error {
	fs := newFlags("healthcheck", "Usage: trendgate healthcheck [-ready] [-config FILE | -url URL]\n\n"+
		"Exit 0 when the admin listener's /healthz (liveness; with -ready, /readyz:\n"+
		"readiness, which turns false while draining) answers 200, for container and\n"+
		"Kubernetes probes. Neither probe needs admin.token, so none is sent.\n"+
		"With -config, the address is the file's admin.listen (a wildcard host is\n"+
		"probed on loopback). A -url without a path gets /healthz or /readyz;\n"+
		"one ending in /healthz gets /readyz with -ready.\n")
	rawURL := fs.String("url", "http://127.0.0.1:9090", "admin listener base `URL`, or the whole probe URL")
	path := fs.String("config", "", "configuration `FILE` whose admin.listen to probe (instead of -url)")
	ready := fs.Bool("ready", false, "probe readiness (/readyz) instead of liveness (/healthz)")
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("healthcheck: unexpected argument %q", fs.Arg(0))
	}
	base := *rawURL
	if *path != "" {
		u, err := adminBase(*path)
		if err != nil {
			return fmt.Errorf("healthcheck: %w", err)
		}
		base = u
	}
	target, err := probeURL(base, *ready)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(target)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var body struct{ Status string }
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if json.Unmarshal(b, &body) == nil && body.Status != "" {
			return fmt.Errorf("healthcheck: %s answered %s: %s", target, resp.Status, body.Status)
		}
		return fmt.Errorf("healthcheck: %s answered %s", target, resp.Status)
	}
	return nil
}

// probeURL returns the URL to probe: base with /healthz (or /readyz when
// ready) when base has no path, base with a /healthz path turned into
// /readyz when ready, and otherwise base as given.
func probeURL(base string, ready bool) (string, error) {
	u, err := parseAdminURL(base)
	if err != nil {
		return "", fmt.Errorf("healthcheck: -url: %w", err)
	}
	probe := "/healthz"
	if ready {
		probe = "/readyz"
	}
	switch {
	case u.Path == "" || u.Path == "/":
		u.Path = probe
	case ready && strings.HasSuffix(u.Path, "/healthz"):
		u.Path = strings.TrimSuffix(u.Path, "/healthz") + probe
	}
	return u.String(), nil
}

// parseAdminURL parses an admin listener URL as an operator types it: a
// URL (http://127.0.0.1:9090) or a bare host:port, which means http://.
func parseAdminURL(raw string) (*url.URL, error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%q is not an admin address such as 127.0.0.1:9090 or http://127.0.0.1:9090", strings.TrimPrefix(raw, "http://"))
	}
	return u, nil
}

// adminBase returns the base URL (http://host:port) of the admin listener
// that the config file at path sets up: a wildcard host is reached on
// loopback.
func adminBase(path string) (string, error) {
	base, _, err := adminAccess(path)
	return base, err
}

// adminAccess returns the base URL of the admin listener the config file
// at path sets up (see adminBase) and its admin.token.
func adminAccess(path string) (base, token string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	a, err := config.AdminAccess(data, os.LookupEnv)
	if err != nil {
		return "", "", err
	}
	base, err = listenBase(a.Listen, path)
	return base, a.Token, err
}

// listenBase turns admin.listen (read from path) into the base URL that
// reaches it.
func listenBase(listen, path string) (string, error) {
	if listen == "off" {
		return "", fmt.Errorf("admin.listen is off in %s; the probes and admin commands need the admin listener", path)
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("admin.listen %q is not host:port", listen)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
