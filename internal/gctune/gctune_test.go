package gctune

import (
	"context"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		live, headroom int64
		want           int
	}{
		{6 * mb, 64 * mb, 1066},  // a small live heap: the goal is live + 64 MB
		{64 * mb, 64 * mb, 100},  // headroom = live: GOGC=100's own goal
		{512 * mb, 64 * mb, 100}, // a large heap: never below 100
		{10 * 1024, 64 * mb, 5000},
		{0, 64 * mb, 5000},
		{6 * mb, 0, 100},
	} {
		if got := Percent(tc.live, tc.headroom); got != tc.want {
			t.Errorf("Percent(%d, %d) = %d; want %d", tc.live, tc.headroom, got, tc.want)
		}
	}
}

func TestStepSetsOnlyOnChange(t *testing.T) {
	const mb = 1 << 20
	live := int64(8 * mb)
	var sets []int
	tu := &Tuner{Headroom: 64 * mb, ReadLive: func() int64 { return live }, Set: func(p int) { sets = append(sets, p) }}
	tu.Step()       // 800
	live = 8.5 * mb // 752: within a tenth of 800, kept
	tu.Step()
	live = 32 * mb // 200
	tu.Step()
	live = 256 * mb // 100
	tu.Step()
	want := []int{800, 200, 100}
	if len(sets) != len(want) {
		t.Fatalf("set %v; want %v", sets, want)
	}
	for i := range want {
		if sets[i] != want[i] {
			t.Fatalf("set %v; want %v", sets, want)
		}
	}
}

func TestRunStepsAtEveryTickUntilCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	lives := make(chan int64, 3)
	tu := &Tuner{Headroom: 100, ReadLive: func() int64 { return <-lives }, Set: func(int) {}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tu.Run(ctx, tick)
	}()
	lives <- 1 // the first Step, before any tick
	tick <- time.Time{}
	lives <- 2
	tick <- time.Time{}
	lives <- 100
	cancel()
	<-done
	if tu.current != 100 {
		t.Errorf("GOGC in force %d after a live heap equal to the headroom; want 100", tu.current)
	}
}

func TestDefaultReadsTheRuntime(t *testing.T) {
	var got int
	tu := &Tuner{Headroom: 1 << 40, Set: func(p int) { got = p }}
	tu.Step()
	if got != maxPercent {
		t.Errorf("GOGC %d for a live heap far below a 1 TB headroom; want %d", got, maxPercent)
	}
}
