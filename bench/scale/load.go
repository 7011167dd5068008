package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// loadResult is what one open-loop run measured.
type loadResult struct {
	requests, ok, hits, failed uint64
	firstError                 string
	p50, p99, mx               time.Duration
	elapsed                    time.Duration
}

// attack sends GET listPath to inst at rate requests a second for d, open
// loop (each request leaves at its time whether or not earlier ones were
// answered), over c's keep-alive connections, each request with the next
// of keys in turn. workers is the number of request goroutines vegeta
// starts with (it adds more when requests queue).
func attack(ctx context.Context, c *http.Client, workers int, inst *instance, keys []string, rate int, d time.Duration) loadResult {
	headers := make([]http.Header, len(keys))
	for i, k := range keys {
		headers[i] = http.Header{"Authorization": {"Bearer " + k}}
	}
	var next atomic.Uint64
	url := inst.base + listPath
	targeter := func(t *vegeta.Target) error {
		if t == nil {
			return vegeta.ErrNilTarget
		}
		t.Method, t.URL = http.MethodGet, url
		t.Header = headers[(next.Add(1)-1)%uint64(len(headers))]
		return nil
	}
	atk := vegeta.NewAttacker(
		vegeta.Client(c),
		vegeta.MaxBody(0), // drain the body without keeping it
		vegeta.Workers(uint64(workers)),
		vegeta.MaxWorkers(20000),
	)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	var (
		m     vegeta.Metrics
		res   loadResult
		began = time.Now()
	)
	for r := range atk.Attack(targeter, vegeta.Rate{Freq: rate, Per: time.Second}, d, "") {
		m.Add(r)
		switch {
		case r.Error != "":
			res.failed++
			if res.firstError == "" {
				res.firstError = r.Error
			}
		case r.Code == http.StatusOK:
			res.ok++
			if strings.HasPrefix(r.Headers.Get("Cache-Status"), "trendgate; hit") {
				res.hits++
			}
		default:
			res.failed++
			if res.firstError == "" {
				res.firstError = fmt.Sprintf("status %d", r.Code)
			}
		}
	}
	m.Close()
	res.elapsed = time.Since(began)
	res.requests = m.Requests
	res.p50, res.p99, res.mx = m.Latencies.P50, m.Latencies.P99, m.Latencies.Max
	return res
}

// hits runs the cached-hit load: an unmeasured -warmup, then -dur at
// -rate, measuring latency, the gateway's CPU time per hit and its disk
// writes.
func (e *env) hits(ctx context.Context, inst *instance, col *column) error {
	if len(inst.used) == 0 {
		col.fail(rowCPU, errors.New("no used key to send the load with"))
		col.fail(rowLoadWrites, errors.New("no used key to send the load with"))
		return errors.New("no key answered 200 in the first-use step")
	}
	c := newClient(e.o.conns, requestTimeout)
	defer c.CloseIdleConnections()
	if e.o.warmup > 0 {
		attack(ctx, c, e.o.conns, inst, inst.used, e.o.rate, e.o.warmup)
	}
	pid := inst.proc.pid()
	cpu0, err := procCPU(pid)
	if err != nil {
		return err
	}
	w0, err := procWrites(pid)
	if err != nil {
		return err
	}
	res := attack(ctx, c, e.o.conns, inst, inst.used, e.o.rate, e.o.dur)
	if err := ctx.Err(); err != nil {
		return err
	}
	cpu1, err := procCPU(pid)
	if err != nil {
		return err
	}
	w1, err := procWrites(pid)
	if err != nil {
		return err
	}
	col.value("load_rate", float64(e.o.rate))
	col.value("load_requests", float64(res.requests))
	col.value("load_hits", float64(res.hits))
	col.value("load_failed", float64(res.failed))
	col.value("load_p50_seconds", res.p50.Seconds())
	col.value("load_p99_seconds", res.p99.Seconds())
	col.value("load_max_seconds", res.mx.Seconds())
	text := fmt.Sprintf("%d/s for %s over %d keys: p50 %s, p99 %s, max %s; %d of %d hits",
		e.o.rate, e.o.dur, len(inst.used), ms(res.p50), ms(res.p99), ms(res.mx), res.hits, res.requests)
	if res.failed > 0 {
		text += fmt.Sprintf(", %d failed (%s)", res.failed, firstLine(res.firstError, 60))
		col.Failures[rowHits] = res.firstError
	}
	col.set(rowHits, text)

	cpu := cpu1 - cpu0
	col.value("load_cpu_seconds", cpu.Seconds())
	if res.hits > 0 {
		per := cpu / time.Duration(res.hits)
		col.value("cpu_per_hit_seconds", per.Seconds())
		col.set(rowCPU, fmt.Sprintf("%.0f µs (%.2f CPU-s for %d hits)", float64(per)/float64(time.Microsecond), cpu.Seconds(), res.hits))
	} else {
		col.fail(rowCPU, errors.New("no request was a cache hit"))
	}
	rate := float64(w1-w0) / res.elapsed.Seconds()
	col.value("load_write_bytes", float64(w1-w0))
	col.value("load_write_bytes_per_second", rate)
	col.set(rowLoadWrites, fmt.Sprintf("%s/s (%s in %s)", bytesText(rate), bytesText(float64(w1-w0)), ms(res.elapsed)))
	return nil
}
