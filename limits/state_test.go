package limits

import "time"

// Test-only views of the limiters' state.

// usage returns the units reserved for key in the windows containing now.
// Tests only.
func (l *Local) usage(key string, now time.Time) (day, month int64) {
	w := windowAt(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.keys[key]
	if st == nil {
		return 0, 0
	}
	if st.day == w.day {
		day = st.dayUsed
	}
	if st.month == w.month {
		month = st.monthUsed
	}
	return day, month
}

// counts returns the number of keys with state and of buckets held.
func (l *Local) counts() (keys, buckets int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys), l.lru.Len()
}

// size returns the number of IPs with state.
func (a *AuthFailures) size() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ips)
}
