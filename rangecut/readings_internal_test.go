package rangecut

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"trendgate/internal/testing/redistest"
	"trendgate/series"
)

var (
	incl = series.Include
	excl = series.Exclude
)

func needAll(series.Reading) bool { return true }

// TestReadingsLearnStateAndConflict: learned facts fill what the statement
// leaves unknown; a fact seen both ways, or contradicting the statement, is
// unknown from then on.
func TestReadingsLearnStateAndConflict(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	k := newReadings(zap.NewNop(), nil, "")
	stated := series.Reading{EndOn: excl}

	none := series.Reading{}
	if got := k.get(ctx, stated, needAll, now); got != none {
		t.Fatalf("nothing learned: got %+v; want nothing (a statement is used once an answer agrees)", got)
	}
	// An answer without a row in the closed edge bucket agrees with the
	// statement: it is used from then on.
	k.learn(ctx, none, series.Reading{EndOn: excl}, stated)
	if got := k.get(ctx, stated, needAll, now); got != stated {
		t.Errorf("after an agreeing answer: got %+v; want %+v", got, stated)
	}
	// The same absence proves nothing without a statement.
	k.learn(ctx, none, series.Reading{StartInside: excl}, stated)
	if got := k.get(ctx, stated, needAll, now); got.StartInside != series.Unknown {
		t.Errorf("an absence without a statement: start_inside %v; want unknown", got.StartInside)
	}
	k.learn(ctx, series.Reading{StartInside: incl}, none, stated)
	if got := k.get(ctx, stated, needAll, now); got != (series.Reading{StartInside: incl, EndOn: excl}) {
		t.Errorf("after learning start_inside: got %+v", got)
	}
	// The upstream includes an end on a boundary after all: the statement
	// is wrong, and the fact is no longer trusted.
	k.learn(ctx, series.Reading{EndOn: incl}, none, stated)
	if got := k.get(ctx, stated, needAll, now); got.EndOn != series.Unknown {
		t.Errorf("statement contradicted: end_on %v; want unknown", got.EndOn)
	}
	// Seen both ways: a conflict, unknown for good.
	k.learn(ctx, series.Reading{StartInside: excl}, none, stated)
	k.learn(ctx, series.Reading{StartInside: incl}, none, stated)
	if got := k.get(ctx, stated, needAll, now); got.StartInside != series.Unknown {
		t.Errorf("start_inside seen both ways: %v; want unknown", got.StartInside)
	}
}

// TestReadingsSharedThroughRedis: what one instance learns another uses
// (after its poll interval), and an instance that learns the opposite marks
// the conflict for both.
func TestReadingsSharedThroughRedis(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t, redistest.Addr)
	prefix := redistest.Prefix(t, rdb)
	a := newReadings(zap.NewNop(), rdb, prefix)
	b := newReadings(zap.NewNop(), rdb, prefix)
	now := time.Unix(1_800_000_000, 0)

	if got := b.get(ctx, series.Reading{}, needAll, now); got != (series.Reading{}) {
		t.Fatalf("nothing learned anywhere: got %+v", got)
	}
	a.learn(ctx, series.Reading{EndOn: excl, EndInside: incl}, series.Reading{}, series.Reading{})
	if got := b.get(ctx, series.Reading{}, needAll, now.Add(time.Second)); got != (series.Reading{}) {
		t.Errorf("before b's next poll: got %+v; want nothing yet", got)
	}
	want := series.Reading{EndOn: excl, EndInside: incl}
	if got := b.get(ctx, series.Reading{}, needAll, now.Add(readingPoll)); got != want {
		t.Errorf("after b's poll: got %+v; want %+v", got, want)
	}
	// b sees the opposite of what a wrote: both end up not trusting it.
	b.learn(ctx, series.Reading{EndInside: excl}, series.Reading{}, series.Reading{})
	if got := b.get(ctx, series.Reading{}, needAll, now.Add(2*readingPoll)); got.EndInside != series.Unknown {
		t.Errorf("b, end_inside seen both ways: %v; want unknown", got.EndInside)
	}
	if got := a.get(ctx, series.Reading{}, needAll, now.Add(2*readingPoll)); got.EndInside != series.Unknown || got.EndOn != excl {
		t.Errorf("a after the conflict: %+v; want end_on exclude, end_inside unknown", got)
	}
}
