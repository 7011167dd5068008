package gateway

import (
	"context"

	"trendgate/limits"
)

// ResetQuota clears account's quota counter of the current UTC day or
// month (w) in the limiter that serves requests, and returns the units it
// held: in this instance's memory (and the state file, when on), or in
// cluster mode in Redis, for every instance. Whether account is
// configured is the caller's to check: an account with no counter clears
// 0. See limits.QuotaResetter for what a reset leaves untouched and for
// its errors (limits.ErrInvalidWindow, limits.ErrUnavailable).
func (g *Gateway) ResetQuota(ctx context.Context, account string, w limits.QuotaWindow) (int64, error) {
	return g.quotas.ResetQuota(ctx, account, w)
}
