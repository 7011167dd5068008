package upstream

import (
	"math"
	"time"
)

// Claim says on whose behalf a budget token is asked for.
type Claim struct {
	// Tenant is the account whose key's cold miss causes the upstream
	// call (all keys of one account share one fair share). ""
	// (a background refresh, or a caller that names no tenant) is not
	// subject to the fair share; background claims keep the refresh
	// reserve instead.
	Tenant string
	// Weight is the tenant's share weight (plans.NAME.upstream_weight);
	// values <= 0 count as 1.
	Weight float64
	// PerMinute caps the tenant's upstream calls per minute
	// (plans.NAME.upstream_per_minute); 0 means no cap.
	PerMinute int
	// Background marks a refresh nobody waits for: it may not use the
	// budget's refresh reserve.
	Background bool
}

// weight is c's weight with the default applied.
func (c Claim) weight() float64 {
	if c.Weight > 0 && !math.IsInf(c.Weight, 0) {
		return c.Weight
	}
	return 1
}

// Verdict is a Budget's answer to one Take.
type Verdict struct {
	// OK means a token was spent and the upstream may be called.
	OK bool
	// RetryAfter, on a refusal, is when a token frees up for this claim.
	RetryAfter time.Duration
	// Share, on a refusal, means the account budget had tokens left but
	// the claim's tenant has used its fair share (or its per-minute cap)
	// while other tenants are asking for upstream data.
	Share bool
	// Upstream, on a refusal, means the upstream itself said to wait (a
	// 429, or a remaining count of 0) and RetryAfter runs to its reset.
	Upstream bool
}

// The fairness rule, shared by LocalBudget and the Lua of RedisBudget.
//
// A tenant is active while it has asked for upstream data (a claim, granted
// or not) within FairWindow. For each window (the minute, the day) with a
// limit L, a part N = NewcomerReserve×L (rounded up, below L) is held back
// for tenants that have not used that window yet; the rest, the pool
// L-N, is split max-min fairly: each active tenant j is guaranteed
// share_j = (L-N)×w_j/W, where W sums the weights of the active tenants
// and the claimant. A claim by tenant k is granted while k is within its
// share and the window has a token left. Beyond its share, k is granted
// only tokens that neither the other active tenants' unused guarantees nor
// the newcomers' part need:
//
//	used_k < share_k, or left-1 >= Σ_{j≠k} max(0, share_j-used_j) + N
//
// So a tenant alone may use the whole pool (never the newcomers' part), a
// newcomer always finds N tokens, and no tenant can take another's
// guarantee. With more active tenants than tokens every share is below one
// call: then each tenant gets at most one call before any gets a second.
// Unused guarantees of tenants that went quiet stop counting after
// FairWindow.

// standing is one tenant's position in a window: weight and tokens used.
type standing struct {
	weight float64
	used   int64
}

// newcomerReserve is the part of a window of limit held back for tenants
// that have not used it yet: ceil(frac×limit), at most limit-1.
func newcomerReserve(limit int64, frac float64) int64 {
	if limit <= 1 || frac <= 0 {
		return 0
	}
	return min(int64(math.Ceil(frac*float64(limit))), limit-1)
}

// shareRefuses reports whether the fairness rule refuses one more token to
// self in a window with the given limit (0: unlimited), total tokens used
// and newcomer reserve, while others are the other active tenants. It
// never refuses for want of tokens: that is the window's own check.
func shareRefuses(limit, used, reserve int64, self standing, others []standing) bool {
	if limit == 0 {
		return false
	}
	pool := float64(limit - reserve)
	total := self.weight
	for _, o := range others {
		total += o.weight
	}
	if float64(self.used) < pool*self.weight/total {
		return false
	}
	held := float64(reserve)
	for _, o := range others {
		if g := pool*o.weight/total - float64(o.used); g > 0 {
			held += g
		}
	}
	return float64(limit-used-1) < held-1e-9
}

// tenantUse is what a LocalBudget remembers of one tenant.
type tenantUse struct {
	weight      float64
	seen        time.Time // last claim
	minute, day window    // the tenant's own use; limit unused
}

// fairTenants is the fair-share state of a LocalBudget; its owner's mutex
// guards it.
type fairTenants struct {
	window  time.Duration // FairWindow
	reserve float64       // NewcomerReserve
	byID    map[string]*tenantUse
}

// claim records c's demand at now and returns its state with the windows
// rolled to ms and ds. Tenants neither active nor seen today are dropped.
func (f *fairTenants) claim(c Claim, now, ms, ds time.Time) *tenantUse {
	if f.byID == nil {
		f.byID = make(map[string]*tenantUse)
	}
	for id, u := range f.byID {
		if now.Sub(u.seen) > f.window && u.seen.Before(ds) {
			delete(f.byID, id)
		}
	}
	u := f.byID[c.Tenant]
	if u == nil {
		u = &tenantUse{}
		f.byID[c.Tenant] = u
	}
	u.weight, u.seen = c.weight(), now
	u.minute.roll(ms, now)
	u.day.roll(ds, now)
	return u
}

// others returns the standings of the active tenants other than self in
// the minute and the day windows starting at ms and ds.
func (f *fairTenants) others(self *tenantUse, now, ms, ds time.Time) (minute, day []standing) {
	for _, u := range f.byID {
		if u == self || now.Sub(u.seen) > f.window {
			continue
		}
		u.minute.roll(ms, now)
		u.day.roll(ds, now)
		minute = append(minute, standing{u.weight, u.minute.used})
		day = append(day, standing{u.weight, u.day.used})
	}
	return minute, day
}
