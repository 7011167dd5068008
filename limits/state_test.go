package limits

import "time"

// Test-only views of the limiters' state.

// usage returns the units reserved for account in the windows containing
// now. Tests only.
func (l *Local) usage(account string, now time.Time) (day, month int64) {
	w := windowAt(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.quotas[account]
	if q == nil {
		return 0, 0
	}
	if q.day == w.day {
		day = q.dayUsed
	}
	if q.month == w.month {
		month = q.monthUsed
	}
	return day, month
}

// counts returns the number of accounts with quota counters and of
// buckets held.
func (l *Local) counts() (accounts, buckets int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.quotas), l.lru.Len()
}

// size returns the number of IPs with state.
func (a *AuthFailures) size() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ips)
}
