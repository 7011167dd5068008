package cache

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"trendgate/internal/clock"
	"trendgate/internal/testing/promtest"
)

// t0 is the fake clock's start: 10:17:00 UTC, mid-hour.
var t0 = time.Date(2026, 11, 22, 10, 17, 0, 0, time.UTC)

// mapStore is a Store that never drops a Set, so freshness tests are exact.
type mapStore struct {
	mu   sync.Mutex // guards m and sets
	m    map[string]*Entry
	sets int
}

func newMapStore() *mapStore { return &mapStore{m: make(map[string]*Entry)} }

func (s *mapStore) Get(_ context.Context, key string) (*Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	return e, ok
}

func (s *mapStore) Set(_ context.Context, e *Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[e.Key] = e
	s.sets++
}

func (s *mapStore) Delete(_ context.Context, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

func (s *mapStore) Clear(context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.m)
}

func (s *mapStore) setCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sets
}

// harness is a Cache over a mapStore with a fake clock and its own registry.
type harness struct {
	c     *Cache
	store *mapStore
	clk   *clock.Fake
	reg   *prometheus.Registry
}

func newHarness(t testing.TB, opts ...Option) *harness {
	t.Helper()
	h := &harness{store: newMapStore(), clk: clock.NewFake(t0), reg: prometheus.NewRegistry()}
	c, err := New(DefaultConfig(), h.store, h.clk, nil, NewMetrics(h.reg), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	h.c = c
	return h
}

// entry builds an entry fresh for ttl from now.
func entry(key, topic string, now time.Time, ttl time.Duration, body string) *Entry {
	return &Entry{Key: key, Topic: topic, Status: 200, ContentType: "application/json",
		Body: []byte(body), Fetched: now, FreshUntil: now.Add(ttl)}
}

// metric returns the summed counter or gauge samples gathered from reg, selected
// by name and (when label != "") one label value; 0 when absent.
func metric(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	var labels []string
	if label != "" {
		labels = []string{label, value}
	}
	sum, _ := promtest.Sum(t, reg, name, labels...)
	return sum
}

// watchdog fails the test if ch does not deliver within a generous bound; it
// guards against hangs, it does not wait for time to pass.
func watchdog[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}
