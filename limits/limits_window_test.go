package limits

import (
	"testing"
	"time"
)

// TestWindowAtKeepsNoStaleWindow: windowAt, which keeps its last window,
// gives what working the window out gives at every instant, across day,
// month and year boundaries and with the time going back.
func TestWindowAtKeepsNoStaleWindow(t *testing.T) {
	end := time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.UTC)
	at := []time.Time{
		end, end.Add(time.Nanosecond), end.Add(-time.Hour), end.Add(24 * time.Hour),
		time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 0, 0, 0, 0, time.FixedZone("UTC+2", 2*3600)), // still 30 November in UTC
		time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC),
		end,
	}
	for _, now := range at {
		for range 2 { // worked out, then kept
			if got, want := windowAt(now), makeWindow(now); got != want {
				t.Errorf("windowAt(%v) = %+v; want %+v", now, got, want)
			}
		}
	}
}
