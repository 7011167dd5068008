package upstream

import (
	"math"
	"time"
)

// Claim says on whose behalf a budget token is asked for.
type Claim struct {
	// Account is the account whose key's cold miss causes the upstream
	// call (all keys of one account share one fair share). ""
	// (a background refresh, or a caller that names no account) is not
	// subject to the fair share; background claims keep the refresh
	// reserve instead.
	Account string
	// Weight is the account's share weight (plans.NAME.upstream_weight);
	// values <= 0 count as 1.
	Weight float64
	// PerMinute caps the account's upstream calls per minute
	// (plans.NAME.upstream_per_minute); 0 means no cap.
	PerMinute int
	// Background marks a refresh nobody waits for: it may not use the
	// budget's refresh reserve.
	Background bool
	// Key names the canonical request the call would answer, for the
	// in-process budget's demand gate (see demandGate): when the minute's
	// calls left cannot cover every refused request, they are kept for
	// the requests asked most. "" is not subject to it.
	Key string
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
	// the claim's account has used its fair share (or, with Cap, its
	// per-minute cap) while other accounts are asking for upstream data.
	Share bool
	// Cap, with Share, means the rule that refused is the account's
	// per-minute cap (Claim.PerMinute), not the fair share.
	Cap bool
	// Upstream, on a refusal, means the upstream itself said to wait (a
	// 429, or a remaining count of 0) and RetryAfter runs to its reset.
	Upstream bool
	// Demand, on a refusal, means the minute's calls left are held for
	// refused requests asked more than this one (see demandGate); the
	// gateway answers it as the budget's refusal.
	Demand bool
}

// The fairness rule, shared by LocalBudget and the Lua of RedisBudget.
//
// An account (an account) is active in a window while it has asked for
// upstream data (a claim, granted or not) recently enough: within
// FairWindow for the day window, within min(FairWindow, 1 minute) for the
// minute window; Withdraw makes it inactive at once (the gateway withdraws
// an account its own limits refuse: it cannot be served anyway), and its
// next claim makes it active again. In the minute window an account is also
// asking while its last claim is at most lendAfter old and it was not
// withdrawn since; in the day window every active account counts as asking.
//
// For each window with a limit L, a part N = NewcomerReserve×L (rounded
// up, below L) is held back for accounts that have not used that window
// yet; the rest, the pool P = L-N, is split among the active accounts in
// whole calls: account j is guaranteed g_j = floor(P×w_j/W), where W sums
// the weights of the active accounts and the claimant. Rounding down is
// what keeps the guarantees whole: they sum to at most P, so no account's
// fraction rounds up into another's guarantee or the newcomers' part. A
// account that used the minute and has stopped asking came, was served and
// went: the newcomer the part is for. Its first call is counted as drawn
// from the part, so the minute holds N less one per such account (never
// below 0) for those still to come.
//
// A claim by account k is granted while the window has a token and k is
// within its guarantee. Beyond it, k borrows: it is granted only tokens
// that neither the unused guarantees of the other accounts still asking
// nor (once k has used the window) the newcomers' part still held need:
//
//	used_k < g_k, or left-1 >= Σ_{j≠k asking} max(0, g_j-used_j) + (used_k > 0 ? H : 0)
//
// where H, the newcomers' part still held, is N-drawn (never below 0) and,
// within the minute's last NewcomerLend, at most N times the part of that
// time left (rounded up): as the minute runs out the part is lent too
// rather than left unused; a newcomer refused then is told to come back
// when the next minute holds the whole part again.
//
// So an account alone may use the whole pool, a newcomer always finds the
// newcomers' part, and no account can take the guarantee of another that
// is asking for it. In the minute, the guarantee of an account that stopped
// asking is lent to whoever asks (work-conserving); when its owner asks
// again it is held again, so the borrowers are refused first and the
// owner takes back what is left of it. What no active account is due (the
// remainders of rounding down, the guarantees of accounts that went quiet
// or were withdrawn) goes to whoever asks. The day is not lent: a day's
// guarantee lent in a quiet minute could not be taken back.
//
// A worked minute (per_minute 20, newcomer reserve 0.2: N = 4, P = 16):
// A asks once at second 0 and is granted; B asks all minute, guaranteed
// 8. Until second 10 A is asking and its 7 unused calls are held, so B
// gets its 8; from second 10 A's 7 are lent, and A's call counts as drawn
// from the newcomers' part, of which 3 stay held: B may go on to
// 20-1-3 = 16 calls. Had A asked again at second 30, after B's 12th call
// (7 calls left), A's 7 unused would be held for it again: B is refused
// from then on, and A may take all 7, within its guarantee.

// newcomersHeld is the part of a minute's newcomer reserve still held: the
// reserve less the calls drawn from it (see the rule), and in the minute's
// last lendWithin (left is what remains of the minute) no more than the
// reserve's share of that time, rounded up: the part is lent too as the
// minute runs out, so it is not left unused when no newcomer came. A
// lendWithin of 0 holds it to the end.
func newcomersHeld(reserve, drawn int64, left, lendWithin time.Duration) int64 {
	held := max(reserve-drawn, 0)
	if lendWithin <= 0 || left >= lendWithin {
		return held
	}
	if left <= 0 {
		return 0
	}
	return min(held, int64(math.Ceil(float64(reserve)*float64(left)/float64(lendWithin))))
}

// lendAfter is how long after its last claim an account's unused guarantee
// is held for it; past it, the guarantee is lent to whoever asks, until
// the account claims again. It is short against the minute: an account
// that asked once at the start of a minute does not keep its part idle
// all minute.
const lendAfter = 10 * time.Second

// lendHorizon is lendAfter, or FairWindow when that is shorter.
func lendHorizon(fairWindow time.Duration) time.Duration { return min(fairWindow, lendAfter) }

// standing is one account's position in a window: weight, tokens used,
// and whether its unused guarantee is held for it (it is asking).
type standing struct {
	weight float64
	used   int64
	asking bool
}

// newcomerReserve is the part of a window of limit held back for accounts
// that have not used it yet: ceil(frac×limit), at most limit-1.
func newcomerReserve(limit int64, frac float64) int64 {
	if limit <= 1 || frac <= 0 {
		return 0
	}
	return min(int64(math.Ceil(frac*float64(limit))), limit-1)
}

// guarantee is an account's whole calls of pool at weight w of total.
func guarantee(pool int64, w, total float64) int64 {
	return int64(math.Floor(float64(pool)*w/total + 1e-9))
}

// withinGuarantee reports whether self's next call in a window of limit
// (reserve held for newcomers) is within its guarantee among others; an
// unlimited window guarantees nothing.
func withinGuarantee(limit, reserve int64, self standing, others []standing) bool {
	if limit == 0 {
		return false
	}
	total := self.weight
	for _, o := range others {
		total += o.weight
	}
	return self.used < guarantee(limit-reserve, self.weight, total)
}

// shareRefuses reports whether the fairness rule refuses one more token to
// self in a window with the given limit (0: unlimited), total tokens used
// and newcomer reserve, while others are the other active accounts and
// heldNew is the part of the reserve still held for newcomers (see
// newcomersHeld). It never refuses for want of tokens: that is the
// window's own check.
func shareRefuses(limit, used, reserve, heldNew int64, self standing, others []standing) bool {
	if limit == 0 {
		return false
	}
	pool := limit - reserve
	total := self.weight
	for _, o := range others {
		total += o.weight
	}
	if self.used < guarantee(pool, self.weight, total) {
		return false
	}
	var held int64
	if self.used > 0 {
		held = heldNew
	}
	for _, o := range others {
		if o.asking {
			held += max(guarantee(pool, o.weight, total)-o.used, 0)
		}
	}
	return limit-used-1 < held
}

// minuteHorizon is how long a claim keeps an account active in the minute
// window: an account that has not asked for a whole minute is not due any
// of the current minute.
func minuteHorizon(fairWindow time.Duration) time.Duration { return min(fairWindow, time.Minute) }

// accountUse is what a LocalBudget remembers of one account.
type accountUse struct {
	weight      float64
	seen        time.Time // last claim
	withdrawn   bool      // inactive until its next claim (Withdraw)
	minute, day window    // the account's own use; limit unused
}

// fairAccounts is the fair-share state of a LocalBudget; its owner's mutex
// guards it.
type fairAccounts struct {
	window  time.Duration // FairWindow
	reserve float64       // NewcomerReserve
	lend    time.Duration // NewcomerLend
	byID    map[string]*accountUse
}

// claim records c's demand at now and returns its state with the windows
// rolled to ms and ds. Accounts neither active nor seen today are dropped.
func (f *fairAccounts) claim(c Claim, now, ms, ds time.Time) *accountUse {
	if f.byID == nil {
		f.byID = make(map[string]*accountUse)
	}
	for id, u := range f.byID {
		if now.Sub(u.seen) > f.window && u.seen.Before(ds) {
			delete(f.byID, id)
		}
	}
	u := f.byID[c.Account]
	if u == nil {
		u = &accountUse{}
		f.byID[c.Account] = u
	}
	u.weight, u.seen, u.withdrawn = c.weight(), now, false
	u.minute.roll(ms, now)
	u.day.roll(ds, now)
	return u
}

// others returns the standings of the accounts other than self active in
// the minute and the day windows starting at ms and ds, and how many
// accounts other than self used the minute and stopped asking (drawn).
func (f *fairAccounts) others(self *accountUse, now, ms, ds time.Time) (minute, day []standing, drawn int64) {
	for _, u := range f.byID {
		if u == self {
			continue
		}
		u.minute.roll(ms, now)
		u.day.roll(ds, now)
		idle := now.Sub(u.seen)
		asking := !u.withdrawn && idle <= lendHorizon(f.window)
		if u.minute.used > 0 && !asking {
			drawn++
		}
		if u.withdrawn || idle > f.window {
			continue
		}
		if idle <= minuteHorizon(f.window) {
			minute = append(minute, standing{u.weight, u.minute.used, asking})
		}
		day = append(day, standing{u.weight, u.day.used, true})
	}
	return minute, day, drawn
}

// withdraw makes account inactive until its next claim; what it used stays
// counted.
func (f *fairAccounts) withdraw(account string) {
	if u := f.byID[account]; u != nil {
		u.withdrawn = true
	}
}
