package inflight

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestAcquireNeverPassesTheBound(t *testing.T) {
	const capacity = 100
	b := New(capacity)
	var inUse, peak atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 16 {
		wg.Go(func() {
			<-start
			for j := range 200 {
				n := int64(1 + (i*37+j*11)%150) // some above the capacity: clamped
				g, err := b.Acquire(context.Background(), n)
				if err != nil {
					t.Errorf("Acquire(%d): %v", n, err)
					return
				}
				now := inUse.Add(g.Bytes())
				for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
				}
				if h := b.Held(); h > capacity {
					t.Errorf("Held() = %d; want at most %d", h, capacity)
				}
				inUse.Add(-g.Bytes())
				g.Release()
			}
		})
	}
	close(start)
	wg.Wait()
	if p := peak.Load(); p > capacity {
		t.Errorf("peak bytes in use %d; want at most %d", p, capacity)
	}
	if h := b.Held(); h != 0 {
		t.Errorf("Held() after every release = %d; want 0", h)
	}
}

func TestAcquireClampsToCapacity(t *testing.T) {
	b := New(10)
	g, err := b.Acquire(context.Background(), 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Bytes(); got != 10 {
		t.Errorf("grant of a request above the capacity = %d bytes; want the capacity, 10", got)
	}
	g.Release()
	if got := b.Held(); got != 0 {
		t.Errorf("Held() = %d after release; want 0", got)
	}
}

// A waiter whose context ends gets the context's error, holds nothing, and
// leaves every byte to the others.
func TestAcquireContextEnds(t *testing.T) {
	b := New(10)
	first, err := b.Acquire(context.Background(), 8)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { // ends when Acquire returns
		g, err := b.Acquire(ctx, 5)
		if err == nil {
			g.Release()
		}
		got <- err
	}()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire after cancel: %v; want context.Canceled", err)
	}
	if h := b.Held(); h != 8 {
		t.Errorf("Held() = %d; want 8 (the first grant only)", h)
	}
	first.Release()
	if !b.sem.TryAcquire(10) {
		t.Fatal("the whole capacity is not free after the cancelled wait: bytes leaked")
	}
	b.sem.Release(10)
	if w := b.Waits(); w != 1 {
		t.Errorf("Waits() = %d; want 1", w)
	}
}

// A waiter is admitted when bytes are released, not before.
func TestAcquireWaitsForRelease(t *testing.T) {
	b := New(10)
	first, err := b.Acquire(context.Background(), 6)
	if err != nil {
		t.Fatal(err)
	}
	admitted := make(chan Grant, 1)
	go func() { // ends when the second Acquire is granted
		g, err := b.Acquire(context.Background(), 6)
		if err != nil {
			t.Error(err)
		}
		admitted <- g
	}()
	select {
	case <-admitted:
		t.Fatal("a 6-byte request was admitted while 6 of 10 bytes were held")
	default:
	}
	first.Release()
	second := <-admitted
	if h := b.Held(); h != 6 {
		t.Errorf("Held() = %d; want 6", h)
	}
	second.Release()
}

func TestNilBound(t *testing.T) {
	var b *Bound
	g, err := b.Acquire(context.Background(), 1<<30)
	if err != nil || g.Bytes() != 0 {
		t.Fatalf("nil Bound: Acquire = %d bytes, %v; want 0, nil", g.Bytes(), err)
	}
	g.Release()
	if b.Held() != 0 || b.Capacity() != 0 || b.Waits() != 0 {
		t.Error("nil Bound reports bytes")
	}
}
