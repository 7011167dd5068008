package limits

import "go.uber.org/zap"

// usable reports whether to try Redis now: the breaker is closed, or its
// back-off has passed (then this caller is the probe and the next back-off
// starts, so only one probe runs at a time).
func (r *Redis) usable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures < r.opts.FailureThreshold {
		return true
	}
	now := r.clk.Now()
	if now.Before(r.openUntil) {
		return false
	}
	r.openUntil = now.Add(r.opts.Backoff)
	return true
}

// failed counts a Redis failure and opens the breaker at the threshold.
func (r *Redis) failed(err error) {
	r.mu.Lock()
	r.failures++
	opened := r.failures == r.opts.FailureThreshold
	if r.failures >= r.opts.FailureThreshold {
		r.openUntil = r.clk.Now().Add(r.opts.Backoff)
	}
	r.mu.Unlock()
	if opened {
		r.m.RedisAvailable.Set(0)
		r.log.Warn("redis unavailable; limiting locally at share", zap.Error(err),
			zap.Float64("share", r.opts.LocalShare))
	}
}

// succeeded closes the breaker and, when it was open, wakes the reconciler.
func (r *Redis) succeeded() {
	r.mu.Lock()
	wasOpen := r.failures >= r.opts.FailureThreshold
	r.failures = 0
	r.mu.Unlock()
	if wasOpen {
		r.m.RedisAvailable.Set(1)
		r.log.Info("redis available again")
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}
