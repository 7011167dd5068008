package main

import (
	"os"
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	now := time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC)
	topics := []string{"bitcoin", "#ai", "ai agents"}
	for _, tc := range []struct {
		name          string
		o             options
		wantRequests  int
		wantDistinct  int
		wantFirstPath string
	}{
		{"flood", options{scenario: "flood", requests: 7, gzip: true}, 7, 7,
			"/api4/public/topic/bitcoin/time-series/v1?bucket=hour&start=1794474000&end=1795078800"}, // 09:00 UTC, one week
		{"replay", options{scenario: "replay", passes: 2}, 3 + 2*4*3, 3,
			"/api4/public/topic/bitcoin/time-series/v1?bucket=hour&interval=all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs := plan(tc.o, topics, now)
			if len(reqs) != tc.wantRequests {
				t.Errorf("got %d requests; want %d", len(reqs), tc.wantRequests)
			}
			paths := map[string]bool{}
			for _, r := range reqs {
				paths[r.path] = true
			}
			if len(paths) != tc.wantDistinct {
				t.Errorf("got %d distinct paths; want %d", len(paths), tc.wantDistinct)
			}
			if reqs[0].path != tc.wantFirstPath {
				t.Errorf("first path %q; want %q", reqs[0].path, tc.wantFirstPath)
			}
		})
	}
}

func TestProcStatus(t *testing.T) {
	st, err := procStatus(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if st.rss <= 0 || st.hwm < st.rss {
		t.Errorf("procStatus = %+v; want 0 < VmRSS <= VmHWM", st)
	}
}
