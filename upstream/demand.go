package upstream

import (
	"math"
	"slices"
	"time"
)

// Scarce calls where the demand is.
//
// When the minute's calls left cannot cover every cold miss, first come,
// first served spends them on whatever arrives first, often requests nobody
// asks for again, while requests many clients keep asking for stay refused.
// demandGate keeps, per canonical request (Claim.Key), how often it was
// asked recently (a count that halves every demandHalfLife) and whether it
// was refused and is still being asked for (pending: refused, and asked
// within pendingFor). A claim for key k, asked d times, is held back when
// the pending requests asked more often than k already number at least the
// minute's calls left: those calls are kept for them. The refusal is the
// budget's (503 upstream_budget_exhausted with Retry-After, when nothing
// stale answers), never a wait. A request that answers many clients is thus
// served before one that answers few, and every refused client is answered
// at once.
//
// The fair share comes first: the gate only sees claims the share allows,
// and a call within its account's guarantee is held only for requests asked
// by more accounts (within demandHalfLife) than its own, so no single
// account, however often it asks, can hold another account's guaranteed
// calls. Only LocalBudget has the gate; RedisBudget ignores Claim.Key.
//
// The gate only ever refuses while other requests are refused too, and only
// in their favour: a workload whose requests are all asked alike (a flood of
// distinct windows) is served first come, first served as before. Claims
// with no Key (a caller that names none) and background refreshes pass it.
//
// Why not a short queue that waits for a call to free up: the minute's calls
// refill only at the minute's end, so a wait of a second or two frees
// nothing in most of the minute, and each waiting request would hold its
// client and a coalesced fill for nothing; ordering by demand at the moment
// of the claim gives the same order without the wait.
type demandGate struct {
	keys map[string]*keyDemand // guarded by the budget's mu
	// pending holds the entries of keys refused since last granted (some
	// perhaps no longer asked for, until a sweep): the claims scan only
	// these.
	pending map[string]*keyDemand
	swept   time.Time // when keys was last swept of forgotten entries
}

// keyDemand is what the gate knows of one canonical request.
type keyDemand struct {
	asks float64   // decayed count of asks, as of at
	at   time.Time // the last ask
	// refusedAt is when a claim for the key was last refused, zero once
	// a claim for it was granted.
	refusedAt time.Time
	// askers are the latest accounts that asked (at most maxAskers), each
	// with its last ask.
	askers []asker
}

type asker struct {
	account string
	at      time.Time
}

// accounts is how many accounts asked for d within the last demandHalfLife.
func (d *keyDemand) accounts(now time.Time) int {
	n := 0
	for _, a := range d.askers {
		if now.Sub(a.at) <= demandHalfLife {
			n++
		}
	}
	return n
}

// asked records account's ask at now.
func (d *keyDemand) asked(account string, now time.Time) {
	if account == "" {
		return
	}
	for i := range d.askers {
		if d.askers[i].account == account {
			d.askers[i].at = now
			return
		}
	}
	if len(d.askers) == maxAskers {
		d.askers = slices.Delete(d.askers, 0, 1)
	}
	d.askers = append(d.askers, asker{account, now})
}

const (
	// demandHalfLife is how fast a request's count of asks fades.
	demandHalfLife = time.Minute
	// pendingFor is how long a refused request still counts as asked for
	// without a new ask: a request in demand is asked again within it.
	pendingFor = 30 * time.Second
	// maxDemandKeys bounds the requests the gate remembers; past it, new
	// requests are not remembered (they count as asked once) until a sweep
	// forgets the faded ones.
	maxDemandKeys = 16384
	// forgetBelow is the faded count under which a request that is not
	// pending is forgotten.
	forgetBelow = 0.1
	// maxAskers bounds keyDemand.askers.
	maxAskers = 8
)

// decayed is d's count of asks at now.
func (d *keyDemand) decayed(now time.Time) float64 {
	age := now.Sub(d.at)
	if age <= 0 {
		return d.asks
	}
	return d.asks * math.Exp2(-float64(age)/float64(demandHalfLife))
}

// isPending reports whether d was refused and is still asked for at now.
func (d *keyDemand) isPending(now time.Time) bool {
	return !d.refusedAt.IsZero() && now.Sub(d.at) <= pendingFor
}

// ask records one ask for key at now and returns its entry (nil when the
// gate is full and key is new).
func (g *demandGate) ask(key, account string, now time.Time) *keyDemand {
	if g.keys == nil {
		g.keys = make(map[string]*keyDemand)
	}
	g.sweep(now)
	d := g.keys[key]
	if d == nil {
		if len(g.keys) >= maxDemandKeys {
			return nil
		}
		d = &keyDemand{}
		g.keys[key] = d
	}
	d.asks = d.decayed(now) + 1
	d.at = now
	d.asked(account, now)
	return d
}

// holds reports whether the claim for key, whose entry is d, should be
// refused so that the minute's left calls go to pending requests asked more
// often. A call within its account's guarantee (guaranteed) is held only
// for requests asked by more accounts than key: one account, however often
// it asks, cannot hold another's guaranteed calls.
func (g *demandGate) holds(key string, d *keyDemand, left int64, now time.Time, guaranteed bool) bool {
	if left < 0 || len(g.pending) == 0 {
		return false // unlimited, or nobody else refused
	}
	asks, accounts := 1.0, 1
	if d != nil {
		asks, accounts = d.asks, d.accounts(now)
	}
	var ahead int64
	for k, o := range g.pending {
		if k == key || !o.isPending(now) {
			continue
		}
		more := o.decayed(now) > asks
		if guaranteed {
			more = o.accounts(now) > accounts
		}
		if more {
			if ahead++; ahead >= left {
				return true
			}
		}
	}
	return false
}

// refused records that the claim for key, whose entry is d, was refused
// at now.
func (g *demandGate) refused(key string, d *keyDemand, now time.Time) {
	if d == nil {
		return
	}
	if g.pending == nil {
		g.pending = make(map[string]*keyDemand)
	}
	g.pending[key] = d
	d.refusedAt = now
}

// granted records that the claim for key, whose entry is d, was granted.
func (g *demandGate) granted(key string, d *keyDemand) {
	if d == nil || d.refusedAt.IsZero() {
		return
	}
	d.refusedAt = time.Time{}
	delete(g.pending, key)
}

// sweep forgets, at most once a second, the requests that are neither
// pending nor asked for any more.
func (g *demandGate) sweep(now time.Time) {
	if now.Sub(g.swept) < time.Second {
		return
	}
	g.swept = now
	for k, d := range g.keys {
		if !d.refusedAt.IsZero() && !d.isPending(now) {
			d.refusedAt = time.Time{}
			delete(g.pending, k)
		}
		if d.refusedAt.IsZero() && d.decayed(now) < forgetBelow {
			delete(g.keys, k)
		}
	}
}

// key is the canonical request req answers, for the demand gate: its
// escaped path and its query in fixed order.
func (req Request) key() string {
	if req.RawQuery == "" {
		return req.Path
	}
	return req.Path + "?" + req.RawQuery
}
