package h1

import (
	"net"
	"testing"
	"time"
)

// deadlineConn records the read deadlines set on it.
type deadlineConn struct {
	net.Conn
	reads []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.reads = append(c.reads, t)
	return nil
}

// TestReplayConnKeepsHeadDeadline: net/http's first read deadline on a
// handed-over connection (its header timeout, counted from when it starts
// reading) may not outlast the head deadline the lane counted from the
// head's first byte; later deadlines pass through.
func TestReplayConnKeepsHeadDeadline(t *testing.T) {
	head := time.Date(2026, 11, 25, 12, 0, 5, 0, time.UTC)
	for _, c := range []struct {
		name        string
		headDL      time.Time
		first, want time.Time
	}{
		{"later first deadline is clamped", head, head.Add(4 * time.Second), head},
		{"no first deadline is clamped", head, time.Time{}, head},
		{"earlier first deadline is kept", head, head.Add(-time.Second), head.Add(-time.Second)},
		{"no head deadline", time.Time{}, head.Add(4 * time.Second), head.Add(4 * time.Second)},
	} {
		dc := &deadlineConn{}
		rc := &replayConn{Conn: dc, headDeadline: c.headDL}
		_ = rc.SetReadDeadline(c.first)
		later := head.Add(time.Minute)
		_ = rc.SetReadDeadline(later)
		_ = rc.SetReadDeadline(time.Time{})
		want := []time.Time{c.want, later, {}}
		if len(dc.reads) != 3 || !dc.reads[0].Equal(want[0]) || !dc.reads[1].Equal(want[1]) || !dc.reads[2].IsZero() {
			t.Errorf("%s: deadlines %v; want %v", c.name, dc.reads, want)
		}
	}
}
