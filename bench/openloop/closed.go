package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// runClosed measures each server closed-loop (each connection sends its
// next request when the last is answered): wrk for HTTP/1.1, h2load for
// HTTP/2, -rounds interleaved rounds, and prints req/s and CPU per request.
func runClosed(ctx context.Context, o options, e *env, servers []*server) error {
	for _, tool := range []string{"wrk", "h2load"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("-closed needs %s (Debian/Ubuntu: apt-get install -y wrk nghttp2-client)", tool)
		}
	}
	fmt.Printf("%-9s %-6s %-5s %-11s %10s %8s %6s\n", "proto", "ep", "round", "server", "req/s", "cpu/req", "errors")
	for round := 1; round <= o.rounds; round++ {
		for _, pr := range o.protos {
			for _, ep := range o.endpoints {
				for _, s := range servers {
					if !s.serves(pr) {
						continue
					}
					if err := closedRun(ctx, o, e, s, pr, ep, round); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func closedRun(ctx context.Context, o options, e *env, s *server, pr protocol, ep string, round int) error {
	url := s.baseURL(pr) + endpoints[ep]
	secs := strconv.Itoa(max(1, int(o.closedDuration/time.Second)))
	auth := "Authorization: Bearer " + e.clientKey
	var cmd *exec.Cmd
	if pr == h2 {
		cmd = exec.CommandContext(ctx, "h2load", "-c", strconv.Itoa(o.conns), "-m", strconv.Itoa(o.streams),
			"-D", secs, "-H", auth, url)
	} else {
		cmd = exec.CommandContext(ctx, "wrk", "-t1", "-c"+strconv.Itoa(o.conns), "-d"+secs+"s", "-H", auth, url)
	}
	cpu, err := startCPU(s.pids(pr), s.name == "nginx")
	if err != nil {
		return err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", cmd.Args[0], err, out)
	}
	used, err := cpu.stop()
	if err != nil {
		return err
	}
	serverCPU := used.server
	rate, errs, err := parseClosed(pr, string(out))
	if err != nil {
		return err
	}
	perReq := time.Duration(0)
	if n := rate * o.closedDuration.Seconds(); n > 0 {
		perReq = time.Duration(float64(serverCPU) / n)
	}
	fmt.Printf("%-9s %-6s %-5d %-11s %10.0f %8s %6d\n", pr, ep, round, s.name, rate, us(perReq), errs)
	return nil
}

var (
	wrkRate    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkErrors  = regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`)
	h2loadRate = regexp.MustCompile(`finished in [0-9.]+\w+, ([0-9.]+) req/s`)
	h2loadDone = regexp.MustCompile(`requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded`)
)

// parseClosed reads req/s and the count of failed requests from wrk's or
// h2load's output.
func parseClosed(pr protocol, out string) (rate float64, errs int, err error) {
	re := wrkRate
	if pr == h2 {
		re = h2loadRate
	}
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, errors.New("no rate in the load tool's output:\n" + strings.TrimSpace(out))
	}
	rate, _ = strconv.ParseFloat(m[1], 64)
	if pr == h2 {
		if d := h2loadDone.FindStringSubmatch(out); d != nil {
			done, _ := strconv.Atoi(d[1])
			ok, _ := strconv.Atoi(d[2])
			errs = done - ok
		}
	} else if e := wrkErrors.FindStringSubmatch(out); e != nil {
		errs, _ = strconv.Atoi(e[1])
	}
	return rate, errs, nil
}
