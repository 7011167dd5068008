package gateway_test

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
)

// loadOutcome is what one load request got.
type loadOutcome struct {
	status int
	err    error // transport error: no response at all
	bodyOK bool  // the body was read completely and is JSON
}

// TestShutdownUnderLoad cancels Serve while requests are in flight at the
// upstream. Every accepted request must complete with a whole 200, the
// public listener must refuse new connections at once, readiness must turn
// false while draining, Serve must return nil, and no goroutine may be left
// behind: on a goroutine per connection and on event loops
// (server.event_loops), where the held requests have left their loops.
func TestShutdownUnderLoad(t *testing.T) {
	t.Run("goroutines", func(t *testing.T) { testShutdownUnderLoad(t, 0) })
	if runtime.GOOS == "linux" {
		t.Run("event loops", func(t *testing.T) { testShutdownUnderLoad(t, 2) })
	}
}

func testShutdownUnderLoad(t *testing.T, loops int) {
	const (
		workers   = 8
		perWorker = 40
		// loadBeforeHold is how many requests per worker complete, on
		// average, before the upstream starts holding requests.
		loadBeforeHold = 10
	)
	baseline := liveGoroutines()
	clk := clock.NewFake(gatewaytest.Now)

	// Once holding is set, the upstream holds every request until gate is
	// closed, so each worker's current request is provably in flight when
	// shutdown begins.
	var holding atomic.Bool
	var done atomic.Int64 // requests that got a response
	gate := make(chan struct{})
	arrivals := make(chan struct{}, workers*perWorker)
	up, upSrv := gatewaytest.StartUpstream(t, clk, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !holding.Load() {
				next.ServeHTTP(w, r)
				return
			}
			arrivals <- struct{}{}
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	many, manyInt, manyUnits := 1e6, 1_000_000, int64(1e9)
	s := gatewaytest.StartGateway(t, upSrv.URL, clk, func(c *config.Config) {
		k := &c.Keys[0]
		k.PerSecond, k.Burst, k.Daily, k.Monthly = &many, &manyInt, &manyUnits, &manyUnits
		c.Server.ShutdownTimeout = 20 * time.Second
		c.Server.EventLoops = config.EventLoops(loops)
	})
	topics := up.Topics()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}

	results := make([][]loadOutcome, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				topic := topics[(w*perWorker+i)%len(topics)]
				resp, body, err := gatewaytest.GetWithKey(t, client, "http://"+s.Public+"/api4/public/topic/"+url.PathEscape(topic)+"/whatsup/v1", s.Key)
				if resp == nil {
					results[w] = append(results[w], loadOutcome{err: err})
					return // the listener is gone: this worker is done
				}
				results[w] = append(results[w], loadOutcome{status: resp.StatusCode, err: err, bodyOK: err == nil && json.Valid(body)})
				if done.Add(1) == workers*loadBeforeHold {
					holding.Store(true)
				}
			}
		})
	}

	for range workers { // every worker has a request held at the upstream
		select {
		case <-arrivals:
		case <-time.After(10 * time.Second):
			t.Fatal("the workers' requests did not reach the upstream")
		}
	}
	s.Cancel() // begin the drain with every worker's request in flight

	// The public listener closes as soon as the drain starts (a connection
	// still in its backlog at that moment is reset).
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Public, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the public listener still accepts connections 5s after shutdown began")
		}
		time.Sleep(5 * time.Millisecond) // polling for the listener to close, not waiting for time to pass
	}
	if _, err := net.DialTimeout("tcp", s.Public, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after shutdown: got %v; want connection refused", err)
	}
	admin := &http.Client{Timeout: 5 * time.Second}
	resp, body, err := gatewaytest.GetWithKey(t, admin, s.Admin+"/readyz", "")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "shutting down") {
		t.Errorf("/readyz while draining: got %v %v %s; want 503 shutting down", resp, err, body)
	}
	admin.CloseIdleConnections()

	close(gate) // let the in-flight requests finish
	wg.Wait()
	start := time.Now()
	if err := s.Stop(25 * time.Second); err != nil {
		t.Fatalf("Serve: got %v; want nil", err)
	}
	t.Logf("Serve returned %v after the last worker finished", time.Since(start))

	var ok, refused int
	for w, rs := range results {
		for i, o := range rs {
			switch {
			case o.err == nil && o.status == http.StatusOK && o.bodyOK:
				ok++
			case o.status != 0:
				t.Errorf("worker %d request %d: accepted but got status %d, body complete %v, err %v", w, i, o.status, o.bodyOK, o.err)
			case errors.Is(o.err, syscall.ECONNREFUSED) || errors.Is(o.err, syscall.ECONNRESET):
				refused++ // never accepted: refused, or reset in the closing backlog
			default:
				t.Errorf("worker %d request %d: got %v; want a 200 or a refused connection", w, i, o.err)
			}
		}
	}
	if ok < workers*loadBeforeHold+workers {
		t.Errorf("complete 200s: got %d; want at least %d (the load before the hold, then one in flight per worker)", ok, workers*loadBeforeHold+workers)
	}
	if refused != workers {
		t.Errorf("refused requests: got %d; want one per worker (%d)", refused, workers)
	}
	t.Logf("%d requests completed with 200, %d refused after shutdown", ok, refused)

	// No goroutine may outlive Serve, the gateway and the upstream.
	client.CloseIdleConnections()
	_ = s.Gateway.Close()
	upSrv.Close()
	deadline = time.Now().Add(5 * time.Second)
	for {
		n := liveGoroutines()
		if n <= baseline {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after shutdown\n%s", baseline, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond) // polling for goroutines to exit
	}
}

// liveGoroutines counts live goroutines. Gateway.Close closes the local
// cache tier, so ristretto's goroutines are counted like any other.
func liveGoroutines() int { return runtime.NumGoroutine() }
