package gateway

import (
	"testing"
	"time"
)

// The reset budget of Go's HTTP/2 server is the lane's: 200 streams ended
// before their response, then spent (once, the GOAWAY) unless time refills
// it at 50 a second.
func TestResetBudget(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		want   int // the charge that spends the budget
		charge func(b *resetBudget) (spentAt int)
	}{
		{"a burst of resets spends it after 200", 201, func(b *resetBudget) int {
			for i := 1; i <= 1000; i++ {
				if b.charge(t0) {
					return i
				}
			}
			return 0
		}},
		{"50 a second refill it", 251, func(b *resetBudget) int {
			for i := 1; i <= 200; i++ {
				if b.charge(t0) {
					return i
				}
			}
			// A second later, 50 more are allowed; the 51st spends it.
			for i := 1; i <= 100; i++ {
				if b.charge(t0.Add(time.Second)) {
					return 200 + i
				}
			}
			return 0
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &resetBudget{tokens: h2ResetBurst}
			if got := tc.charge(b); got != tc.want {
				t.Errorf("spent at charge %d; want %d", got, tc.want)
			}
			if !b.isSpent() {
				t.Errorf("isSpent false after the budget was spent")
			}
			if b.charge(t0.Add(time.Hour)) {
				t.Errorf("a later charge spent it again; want one GOAWAY per connection")
			}
		})
	}
}
