package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"trendgate/auth"
)

// listPath is the request every measured client makes: the topics list,
// cached for an hour by the generated configuration.
const listPath = "/api4/public/topics/list/v1"

// The gateway's log lines that end a reload (JSON, zap's "msg" member).
const (
	msgReloaded = `"msg":"config reloaded"`
	msgRefused  = `"msg":"config reload refused`
)

// requestTimeout bounds one request of a client key.
const requestTimeout = 10 * time.Second

// instance is one running gateway.
type instance struct {
	proc  *process
	file  string       // its configuration file
	base  string       // public listener, http://host:port
	admin string       // admin listener, http://host:port
	token string       // admin token
	api   *http.Client // public listener, one connection
	adm   *http.Client // admin listener
	// used holds the secrets of the keys that answered 200 in the
	// first-use step; the cached-hit load spreads its requests over them.
	used []string
}

// measure runs every step for setup s, filling col. A step that fails
// fills its cell with the reason and the next step runs, unless the
// gateway is gone or ctx is done.
func (e *env) measure(ctx context.Context, s setup, col *column) {
	dir := filepath.Join(e.dir, strings.ReplaceAll(s.name(), "/", "-"))
	if err := os.Mkdir(dir, 0o700); err != nil {
		col.fail(rowStart, err)
		return
	}
	ks, err := newKeySet(s)
	if err != nil {
		col.fail(rowStart, err)
		return
	}
	inst, file, err := e.startSingle(ctx, dir, ks, col)
	if err != nil {
		col.fail(rowStart, err)
	} else {
		e.measureRunning(ctx, inst, ks, col)
		inst.proc.stop(30 * time.Second)
	}
	if ctx.Err() == nil && file != nil {
		e.configCheck(ctx, dir, file, col)
	}
	switch {
	case ctx.Err() != nil:
	case e.o.cluster:
		e.measureCluster(ctx, dir, ks, col)
	default:
		col.Cells[rowCluster] = "off (-cluster)"
	}
}

// measureRunning runs the steps that need the single gateway inst.
func (e *env) measureRunning(ctx context.Context, inst *instance, ks *keySet, col *column) {
	steps := []struct {
		row string
		fn  func(context.Context) error
	}{
		{rowRSS, func(ctx context.Context) error { return e.rssAtRest(ctx, inst, col) }},
		{rowReload, func(ctx context.Context) error { return e.reload(ctx, inst, nil, col) }},
		{rowReloadKey, func(ctx context.Context) error { return e.reloadOneKey(ctx, inst, ks, col) }},
		{rowCreate, func(ctx context.Context) error { return e.creates(ctx, inst, ks, col) }},
		{rowFirstUse, func(ctx context.Context) error { return e.firstUses(ctx, inst, ks, col) }},
		{rowIdleWrites, func(ctx context.Context) error { return e.idleWrites(ctx, inst, col) }},
		{rowHits, func(ctx context.Context) error { return e.hits(ctx, inst, col) }},
		{rowMetrics, func(ctx context.Context) error { return e.metricsSize(ctx, inst, col) }},
		{rowUsage, func(ctx context.Context) error { return e.keysUsage(ctx, inst, col) }},
	}
	for _, st := range steps {
		if ctx.Err() != nil {
			col.fail(st.row, errors.New("interrupted"))
			continue
		}
		if !inst.proc.alive() {
			col.fail(st.row, fmt.Errorf("the gateway exited: %s", inst.proc.tail()))
			continue
		}
		if err := st.fn(ctx); err != nil {
			col.fail(st.row, err)
		}
	}
}

// startSingle writes the single-instance file (state.path and keys_file in
// dir) and starts the gateway on it, filling rowStart. It returns the
// file's content for config check even when the start failed.
func (e *env) startSingle(ctx context.Context, dir string, ks *keySet, col *column) (*instance, []byte, error) {
	addrs, err := freeAddrs(2)
	if err != nil {
		return nil, nil, err
	}
	g := gatewayFile{
		listen: addrs[0], admin: addrs[1], upstream: e.upstreamURL,
		statePath: filepath.Join(dir, "state"), keysFile: filepath.Join(dir, "keys.yaml"),
	}
	file := ks.render(g)
	path := filepath.Join(dir, "trendgate.yaml")
	if err := writeFile(path, file); err != nil {
		return nil, nil, err
	}
	col.value("config_file_bytes", float64(len(file)))
	inst, took, err := e.startGateway(ctx, dir, "gateway", path, g)
	if err != nil {
		return nil, file, err
	}
	col.value("start_seconds", took.Seconds())
	col.set(rowStart, fmt.Sprintf("%s (file %s)", ms(took), bytesText(float64(len(file)))))
	return inst, file, nil
}

// startGateway starts `trendgate serve` on path and waits until its
// /readyz answers 200.
func (e *env) startGateway(ctx context.Context, dir, name, path string, g gatewayFile) (*instance, time.Duration, error) {
	began := time.Now()
	p, err := start(dir, name, e.childEnv(), e.o.bin, "serve", "-config", path, "-watch", "0")
	if err != nil {
		return nil, 0, err
	}
	inst := &instance{
		proc: p, file: path, base: "http://" + g.listen, admin: "http://" + g.admin, token: e.adminToken,
		api: newClient(1, requestTimeout), adm: newClient(2, e.o.stepTimeout),
	}
	ctx, cancel := context.WithTimeout(ctx, e.o.startTimeout)
	defer cancel()
	probe := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := probe.Get(inst.admin + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return inst, time.Since(began), nil
			}
		}
		select {
		case <-p.exited:
			return nil, 0, fmt.Errorf("the gateway exited during start: %s", p.tail())
		case <-ctx.Done():
			p.stop(10 * time.Second)
			return nil, 0, fmt.Errorf("not ready within %s: %w", e.o.startTimeout, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rssAtRest reads VmRSS after -settle.
func (e *env) rssAtRest(ctx context.Context, inst *instance, col *column) error {
	if err := sleep(ctx, e.o.settle); err != nil {
		return err
	}
	rss, err := procRSS(inst.proc.pid())
	if err != nil {
		return err
	}
	col.value("rss_at_rest_bytes", float64(rss))
	col.set(rowRSS, fmt.Sprintf("%.0f MB", float64(rss)/1e6))
	return nil
}

// reload sends SIGHUP, after applying change to the file if it is not
// nil, and measures the time until the gateway logs that the reload was
// applied (or refused: a failure), and the CPU time it spent meanwhile.
func (e *env) reload(ctx context.Context, inst *instance, change func() error, col *column) error {
	row, name := rowReload, "reload_unchanged"
	if change != nil {
		row, name = rowReloadKey, "reload_one_key"
	}
	msgs := []string{msgReloaded, msgRefused}
	before := make([]int, len(msgs))
	for i, m := range msgs {
		n, err := inst.proc.countLog(m)
		if err != nil {
			return err
		}
		before[i] = n
	}
	if change != nil {
		if err := change(); err != nil {
			return err
		}
	}
	cpu := startCPUTrace(inst.proc.pid())
	began := time.Now()
	if err := inst.proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		cpu.stop()
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, e.o.stepTimeout)
	defer cancel()
	which, line, err := inst.proc.waitLog(wctx, msgs, before)
	cpu.stop()
	if err != nil {
		return fmt.Errorf("no reload logged within %s: %w", e.o.stepTimeout, err)
	}
	// The line's own time says when the reload was done; it reaches the
	// file up to a second later (the gateway's log is buffered).
	at, err := logTime(line)
	if err != nil {
		return err
	}
	took := max(at.Sub(began), 0)
	if which == 1 {
		return fmt.Errorf("reload refused after %s: %s", ms(took), firstLine(line, 200))
	}
	spent, err := cpu.until(at)
	if err != nil {
		return err
	}
	col.value(name+"_seconds", took.Seconds())
	col.value(name+"_cpu_seconds", spent.Seconds())
	col.set(row, fmt.Sprintf("%s (%.2f CPU-s)", ms(took), spent.Seconds()))
	return nil
}

// reloadOneKey appends one key to the file, reloads, and checks that the
// new key is then accepted.
func (e *env) reloadOneKey(ctx context.Context, inst *instance, ks *keySet, col *column) error {
	secret, err := auth.Generate()
	if err != nil {
		return err
	}
	change := func() error {
		f, err := os.OpenFile(inst.file, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := f.Write(ks.keyLines("reload-added", secret)); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if err := e.reload(ctx, inst, change, col); err != nil {
		return err
	}
	status, _, err := get(ctx, inst.api, inst.base+listPath, secret)
	if err != nil {
		return fmt.Errorf("the added key: %w", err)
	}
	if status != http.StatusOK {
		col.set(rowReloadKey, col.Cells[rowReloadKey]+fmt.Sprintf(", but the added key got %d", status))
	}
	return nil
}

// createdKey is the part of POST /keys's answer the bench checks.
type createdKey struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

// createKey creates the key id through the admin key API, in the account
// of key 0 (or with the bench plan when each key is its own account), and
// returns the answer's status and the new key's secret.
func createKey(ctx context.Context, inst *instance, ks *keySet, id string) (int, string, error) {
	body := map[string]string{"id": id, "plan": "bench"}
	if a := ks.account(0); a != "" {
		body = map[string]string{"id": id, "account": a}
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, inst.admin+"/keys", bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+inst.token)
	resp, err := inst.adm.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, "", err
	}
	if resp.StatusCode != http.StatusCreated {
		return resp.StatusCode, "", fmt.Errorf("POST /keys: %s: %.200s", resp.Status, raw)
	}
	var k createdKey
	if err := json.Unmarshal(raw, &k); err != nil {
		return resp.StatusCode, "", fmt.Errorf("POST /keys: %w", err)
	}
	if k.Secret == "" {
		return resp.StatusCode, "", errors.New("POST /keys: 201 without a secret")
	}
	return resp.StatusCode, k.Secret, nil
}

// creates creates -creates keys one after another; the step gives up
// after a failed create or once -step-timeout has passed since the start.
func (e *env) creates(ctx context.Context, inst *instance, ks *keySet, col *column) error {
	if e.o.creates == 0 {
		col.set(rowCreate, "skipped (-creates 0)")
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.o.stepTimeout)
	defer cancel()
	var took []time.Duration
	var failure error
	for i := range e.o.creates {
		began := time.Now()
		_, _, err := createKey(ctx, inst, ks, fmt.Sprintf("created-%03d", i))
		if err != nil {
			failure = err
			break
		}
		took = append(took, time.Since(began))
	}
	if len(took) == 0 {
		return failure
	}
	slices.Sort(took)
	med, mx := took[len(took)/2], took[len(took)-1]
	col.value("create_median_seconds", med.Seconds())
	col.value("create_max_seconds", mx.Seconds())
	col.value("creates_ok", float64(len(took)))
	text := fmt.Sprintf("median %s, max %s (%d created)", ms(med), ms(mx), len(took))
	if failure != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		text = fmt.Sprintf("median %s, max %s: %d of %d created within -step-timeout %s", ms(med), ms(mx), len(took), e.o.creates, e.o.stepTimeout)
		col.Failures[rowCreate] = failure.Error()
	} else if failure != nil {
		text += ", then failed: " + firstLine(failure.Error(), 60)
		col.Failures[rowCreate] = failure.Error()
	}
	col.set(rowCreate, text)
	return nil
}

// firstUseKeys picks the never-used keys of the first-use step: spread
// evenly over the file, at most -first-use.
func (e *env) firstUseKeys(ks *keySet) []int {
	n := min(e.o.firstUse, ks.keys)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i * ks.keys / n
	}
	return idx
}

// firstUses makes each first-use key's first request, one after another,
// within -first-use-timeout.
func (e *env) firstUses(ctx context.Context, inst *instance, ks *keySet, col *column) error {
	idx := e.firstUseKeys(ks)
	if len(idx) == 0 {
		col.set(rowFirstUse, "skipped (-first-use 0)")
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.o.firstTimeout)
	defer cancel()
	var (
		took     []time.Duration
		ok       int
		statuses = map[int]int{}
		firstErr error
		began    = time.Now()
	)
	inst.used = inst.used[:0]
	for _, i := range idx {
		t0 := time.Now()
		status, _, err := get(ctx, inst.api, inst.base+listPath, ks.secrets[i])
		if ctx.Err() != nil {
			break
		}
		took = append(took, time.Since(t0))
		switch {
		case err != nil:
			if firstErr == nil {
				firstErr = err
			}
		case status == http.StatusOK:
			ok++
			inst.used = append(inst.used, ks.secrets[i])
		default:
			statuses[status]++
		}
	}
	total := time.Since(began)
	if len(took) == 0 {
		return fmt.Errorf("no first request answered within %s", e.o.firstTimeout)
	}
	sorted := slices.Clone(took)
	slices.Sort(sorted)
	p50, p99, mx := quantile(sorted, 0.5), quantile(sorted, 0.99), sorted[len(sorted)-1]
	col.value("first_use_keys", float64(len(idx)))
	col.value("first_use_answered", float64(len(took)))
	col.value("first_use_200", float64(ok))
	col.value("first_use_total_seconds", total.Seconds())
	col.value("first_use_p50_seconds", p50.Seconds())
	col.value("first_use_p99_seconds", p99.Seconds())
	col.value("first_use_max_seconds", mx.Seconds())
	text := fmt.Sprintf("%d keys in %s: p50 %s, p99 %s, max %s; %d answered 200", len(took), ms(total), ms(p50), ms(p99), ms(mx), ok)
	if len(took) < len(idx) {
		text = fmt.Sprintf("stopped at -first-use-timeout %s after %d of %d keys: p50 %s, p99 %s, max %s; %d answered 200",
			e.o.firstTimeout, len(took), len(idx), ms(p50), ms(p99), ms(mx), ok)
	}
	for status, n := range statuses {
		text += fmt.Sprintf(", %d answered %d", n, status)
	}
	if firstErr != nil {
		text += ", error: " + firstLine(firstErr.Error(), 60)
		col.Failures[rowFirstUse] = firstErr.Error()
	}
	col.set(rowFirstUse, text)
	return nil
}

// idleWrites measures the disk writes of the gateway over -idle with no
// traffic, after -settle: the flushes of the traffic just before (the
// state journal's and the usage history's, one flush interval each) land
// before the window opens, so the window holds only what an idle gateway
// writes.
func (e *env) idleWrites(ctx context.Context, inst *instance, col *column) error {
	if err := sleep(ctx, e.o.settle); err != nil {
		return err
	}
	w0, err := procWrites(inst.proc.pid())
	if err != nil {
		return err
	}
	began := time.Now()
	if err := sleep(ctx, e.o.idle); err != nil {
		return err
	}
	w1, err := procWrites(inst.proc.pid())
	if err != nil {
		return err
	}
	el := time.Since(began)
	rate := float64(w1-w0) / el.Seconds()
	col.value("idle_write_bytes", float64(w1-w0))
	col.value("idle_write_bytes_per_second", rate)
	col.set(rowIdleWrites, fmt.Sprintf("%s/s (%s in %s, %d used keys)", bytesText(rate), bytesText(float64(w1-w0)), ms(el), len(inst.used)))
	return nil
}

// metricsSize scrapes /metrics once and reports its size and time.
func (e *env) metricsSize(ctx context.Context, inst *instance, col *column) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, inst.admin+"/metrics", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+inst.token)
	began := time.Now()
	resp, err := inst.adm.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return err
	}
	took := time.Since(began)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/metrics: %s", resp.Status)
	}
	col.value("metrics_bytes", float64(n))
	col.value("metrics_seconds", took.Seconds())
	col.set(rowMetrics, fmt.Sprintf("%s in %s", bytesText(float64(n)), ms(took)))
	return nil
}

// configCheck runs `trendgate config check` on the file with its last
// line broken and measures how long it takes to refuse it.
func (e *env) configCheck(ctx context.Context, dir string, file []byte, col *column) {
	path := filepath.Join(dir, "broken.yaml")
	if err := writeFile(path, breakLastLine(file)); err != nil {
		col.fail(rowCheck, err)
		return
	}
	out, took, err := e.runTool(ctx, nil, "config", "check", "-config", path)
	var exit *exec.ExitError
	switch {
	case err == nil:
		col.fail(rowCheck, errors.New("exit status 0: the broken file was accepted"))
		return
	case !errors.As(err, &exit):
		col.fail(rowCheck, err)
		return
	}
	col.value("config_check_broken_seconds", took.Seconds())
	said := strings.ReplaceAll(out.head.String(), path+": ", "")
	col.set(rowCheck, fmt.Sprintf("refused in %s (exit %d): %s", ms(took), exit.ExitCode(), firstLine(said, 70)))
}

// keysUsage runs `trendgate keys usage` against inst's admin listener and
// reports how long it takes and how much it prints.
func (e *env) keysUsage(ctx context.Context, inst *instance, col *column) error {
	out, took, err := e.runTool(ctx, []string{"TRENDGATE_ADMIN_TOKEN=" + inst.token}, "keys", "usage", "-admin", inst.admin)
	if err != nil {
		return fmt.Errorf("%w: %s", err, firstLine(out.head.String(), 200))
	}
	col.value("keys_usage_seconds", took.Seconds())
	col.value("keys_usage_lines", float64(out.lines))
	col.set(rowUsage, fmt.Sprintf("%d lines (%s) in %s", out.lines, bytesText(float64(out.n)), ms(took)))
	return nil
}

// runTool runs the trendgate binary with args (and env added to the
// generated files' environment), bounded by -step-timeout, and returns its
// output's size and first bytes, and how long it ran. A run cut short by
// the bound is an error saying so.
func (e *env) runTool(ctx context.Context, env []string, args ...string) (*outputTally, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, e.o.stepTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.o.bin, args...)
	cmd.Env = append(append(os.Environ(), e.childEnv()...), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out := &outputTally{}
	cmd.Stdout, cmd.Stderr = out, out
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	if ctx.Err() != nil {
		return out, took, fmt.Errorf("no answer within %s (killed)", e.o.stepTimeout)
	}
	return out, took, err
}

// outputTally counts a child's output and keeps its first 4 KiB.
type outputTally struct {
	n, lines int
	head     bytes.Buffer
}

func (t *outputTally) Write(p []byte) (int, error) {
	t.n += len(p)
	t.lines += bytes.Count(p, []byte{'\n'})
	if room := 4096 - t.head.Len(); room > 0 {
		t.head.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// get sends one GET with the key and returns the status and the
// Cache-Status header.
func get(ctx context.Context, c *http.Client, url, key string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return resp.StatusCode, "", err
	}
	return resp.StatusCode, resp.Header.Get("Cache-Status"), nil
}

// quantile returns the q quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// firstLine returns s's first non-empty line, cut at n bytes.
func firstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// freeAddrs returns n loopback addresses that were free a moment ago (the
// gateway binds them next; a collision makes its start fail, it cannot
// mismeasure).
func freeAddrs(n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		out[i] = ln.Addr().String()
		defer ln.Close()
	}
	return out, nil
}
