package rangecut

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/demo"
	"trendgate/internal/clock"
	"trendgate/series"
)

// mapCache is a Cache of plain entries.
type mapCache struct {
	mu sync.Mutex
	m  map[string]*cache.Entry
}

func (c *mapCache) Peek(_ context.Context, key string) (*cache.Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	return e, ok
}

func (c *mapCache) Put(_ context.Context, e *cache.Entry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]*cache.Entry)
	}
	c.m[e.Key] = e
	return nil
}

const upstreamKey = "rangecut-test-upstream-credential"

// answer is the demo upstream's answer to q at the clock's time, as an
// entry fetched then.
func answer(t *testing.T, up *demo.Server, q api.Request, now time.Time, ttl *cache.Config) *cache.Entry {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, q.UpstreamPath()+"?"+q.UpstreamQuery(), nil)
	r.Header.Set("Authorization", "Bearer "+upstreamKey)
	status, body := up.AnswerAt(r, now)
	if status != http.StatusOK {
		t.Fatalf("demo %s: %d %s", r.URL, status, body)
	}
	return &cache.Entry{
		Key: q.Key(), Topic: q.Topic, Status: status, Body: body, Fetched: now,
		FreshUntil: ttl.FreshUntil(cache.Class{Endpoint: q.Endpoint, Bucket: q.Bucket, End: q.WindowEnd()}, now),
	}
}

// TestWidenedCutAndPause: a cold hourly window reaching the current hour
// is widened to the week, which is stored and cut; a week whose rows stop
// short of the window (the upstream's clock behind ours) is not cut, and
// widening pauses for widenPause.
func TestWidenedCutAndPause(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC)
	ttl := cache.DefaultConfig()
	for _, behind := range []time.Duration{0, 3 * time.Hour} {
		t.Run(fmt.Sprint(behind), func(t *testing.T) {
			clk := clock.NewFake(now)
			up, err := demo.New(demo.Options{Clock: clk, APIKey: upstreamKey, ClockOffset: -behind})
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()
			store := &mapCache{}
			c := New(Options{Clock: clk, Logger: zap.NewNop(), Cache: store})
			all := series.Reading{StartInside: series.Include, EndOn: series.Include, EndInside: series.Include}
			target := fmt.Sprintf("/api4/public/topic/%s/time-series/v1?start=%d&end=%d",
				url.PathEscape(up.Topics()[0]), now.Unix()/3600*3600-5*3600, now.Unix())
			req, err := api.ParseRequest(httptest.NewRequest(http.MethodGet, target, nil), now)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := c.Widened(ctx, req, now); ok {
				t.Fatal("widened with the reading unknown; want the window fetched itself")
			}
			c.readings.note(all, [3]bool{}, "test")
			wide, ok := c.Widened(ctx, req, now)
			if !ok || wide.Interval != "1w" || wide.Start != 0 || wide.End != 0 {
				t.Fatalf("Widened: %+v, %v; want the week", wide, ok)
			}
			got := c.CutWidened(ctx, req, answer(t, up, wide, now, &ttl), answer(t, up, req, now, &ttl), false, &ttl)
			if _, ok := store.Peek(ctx, wide.Key()); !ok {
				t.Error("the week was not stored")
			}
			if behind == 0 {
				want := answer(t, up, req, now, &ttl)
				if got == nil || got.Derived || got.Key != req.Key() || !bytes.Equal(got.Body, want.Body) {
					t.Fatalf("the cut: %+v; want the upstream's own answer to the window", got)
				}
				if _, ok := c.Widened(ctx, req, now); !ok {
					t.Error("widening paused after a week that covered the window")
				}
				return
			}
			if got != nil {
				t.Fatalf("a week %s behind was cut: %.200s", behind, got.Body)
			}
			if _, ok := c.Widened(ctx, req, now.Add(widenPause-time.Second)); ok {
				t.Error("widened within the pause")
			}
			if _, ok := c.Widened(ctx, req, now.Add(widenPause)); !ok {
				t.Error("not widened after the pause")
			}
		})
	}
}
