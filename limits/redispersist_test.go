package limits

import (
	"context"
	"testing"

	"trendgate/internal/testing/redistest"
)

func TestPersistenceKeeps(t *testing.T) {
	tests := []struct {
		p       Persistence
		keeps   string
		nothing bool
	}{
		{Persistence{Known: true}, "nothing", true},
		{Persistence{Known: true, AOF: true}, "aof", false},
		{Persistence{Known: true, Save: "3600 1 300 100"}, "rdb", false},
		{Persistence{Known: true, AOF: true, Save: "3600 1"}, "aof+rdb", false},
		{Persistence{Why: "CONFIG GET appendonly: NOPERM"}, "unknown (CONFIG GET appendonly: NOPERM)", false},
	}
	for _, tc := range tests {
		if got := tc.p.Keeps(); got != tc.keeps {
			t.Errorf("%+v.Keeps() = %q; want %q", tc.p, got, tc.keeps)
		}
		if got := tc.p.KeepsNothing(); got != tc.nothing {
			t.Errorf("%+v.KeepsNothing() = %v; want %v", tc.p, got, tc.nothing)
		}
	}
}

// TestReadPersistence asks the shared test Redis, whose answer must be
// known and agree with CONFIG GET.
func TestReadPersistence(t *testing.T) {
	rdb := redistest.Client(t, redistest.Addr)
	p := ReadPersistence(context.Background(), rdb)
	if !p.Known {
		t.Fatalf("persistence unknown: %s", p.Why)
	}
	aof, _ := rdb.ConfigGet(context.Background(), "appendonly").Result()
	if p.AOF != (aof["appendonly"] == "yes") {
		t.Errorf("AOF %v; CONFIG GET appendonly says %q", p.AOF, aof["appendonly"])
	}
}
