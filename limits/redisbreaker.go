package limits

import "trendgate/internal/breaker"

// breakerChanged follows the Redis breaker: the availability gauge, and on
// closing a kick for the reconciler so the journal is replayed at once.
func (r *Redis) breakerChanged(s breaker.State) {
	switch s {
	case breaker.Open:
		r.m.RedisAvailable.Set(0)
	case breaker.Closed:
		r.m.RedisAvailable.Set(1)
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}
