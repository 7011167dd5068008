package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"trendgate/internal/clock"
)

// memKeeper stores a Local's checkpoints in memory, as package state does
// on disk: Sync takes a checkpoint with reservations, "stores" it over what
// it held and commits it. fail makes the next stores fail.
type memKeeper struct {
	l   *Local
	clk clock.Clock

	mu     sync.Mutex
	stored []Counter
	syncs  int
	fail   bool
}

// newKeptLocal returns a Local on clk whose counters a memKeeper keeps.
func newKeptLocal(t testing.TB, clk clock.Clock) (*Local, *memKeeper) {
	t.Helper()
	l := newLocal(t, clk, nil)
	k := &memKeeper{l: l, clk: clk}
	l.SetKeeper(k)
	return l, k
}

func (k *memKeeper) Sync(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.syncs++
	if k.fail {
		return errors.New("disk full")
	}
	cs := k.l.Checkpoint(k.clk.Now(), true)
	k.store(cs)
	k.l.Commit(cs)
	return nil
}

// store writes cs over what the keeper holds, counter by counter, as the
// state file's journal does: a checkpoint holds only the accounts that
// changed.
func (k *memKeeper) store(cs []Counter) {
next:
	for _, c := range cs {
		for i := range k.stored {
			if k.stored[i].Subject == c.Subject {
				k.stored[i] = c
				continue next
			}
		}
		k.stored = append(k.stored, c)
	}
}

// storedFor returns what the keeper holds for subject.
func (k *memKeeper) storedFor(subject string) (day, month int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.stored {
		if c.Subject == subject {
			return c.DayUsed, c.MonthUsed
		}
	}
	return 0, 0
}

// TestKeeperStoredNeverBelowReserved is the crash guarantee: at every
// moment, what the keeper holds is at least what was reserved, so a
// restart from it never forgets a unit; and the excess is at most the
// reservation ahead (1% of the quota here).
func TestKeeperStoredNeverBelowReserved(t *testing.T) {
	clk := clock.NewFake(t0)
	l, k := newKeptLocal(t, clk)
	p := Policy{Daily: 20000, Monthly: 400000}
	for i := range 500 {
		d, err := l.Admit(context.Background(), Subject{Key: "acme"}, p, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("request %d: allowed %v, err %v", i, d.Allowed, err)
		}
		used, _ := l.usage("acme", clk.Now())
		sd, sm := k.storedFor("acme")
		if sd < used || sm < used {
			t.Fatalf("after %d requests: stored day %d month %d below the %d reserved", i+1, sd, sm, used)
		}
		if sd-used > p.Daily/100 {
			t.Fatalf("after %d requests: stored day %d is %d past the %d reserved; want at most 1%% of the quota", i+1, sd, sd-used, used)
		}
	}
	// Reservations grow with use: far fewer syncs than requests.
	if k.syncs > 50 {
		t.Errorf("500 requests took %d syncs; want reservations ahead to spare most of them", k.syncs)
	}
}

// TestKeeperCleanCheckpointIsExact: the last checkpoint of a clean stop
// stores what was used, no reservation.
func TestKeeperCleanCheckpointIsExact(t *testing.T) {
	clk := clock.NewFake(t0)
	l, _ := newKeptLocal(t, clk)
	p := Policy{Daily: 30, Monthly: 1000}
	admitN(t, l, "team", p, 1, 12)
	cs := l.Checkpoint(clk.Now(), false)
	if len(cs) != 1 || cs[0].DayUsed != 12 || cs[0].MonthUsed != 12 {
		t.Fatalf("exact checkpoint = %+v; want team at 12/12", cs)
	}
}

// TestKeeperCeilingNeverPastQuota: a reservation never stores more than
// the quota, so a crash cannot show a key past it.
func TestKeeperCeilingNeverPastQuota(t *testing.T) {
	clk := clock.NewFake(t0)
	l, k := newKeptLocal(t, clk)
	p := Policy{Daily: 30}
	got := admitN(t, l, "team", p, 1, 40)
	if got[""] != 30 || got[ReasonDaily] != 10 {
		t.Fatalf("outcomes %v; want 30 allowed, 10 daily_quota_exceeded", got)
	}
	if d, _ := k.storedFor("team"); d != 30 {
		t.Errorf("stored %d; want exactly the quota, 30", d)
	}
}

// TestKeeperFailureAdmitsPastCeiling: a keeper that cannot store does not
// turn into an outage; requests pass their ceilings.
func TestKeeperFailureAdmitsPastCeiling(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLocal(t, clk, nil)
	k := &memKeeper{l: l, clk: clk, fail: true}
	l.SetKeeper(k)
	got := admitN(t, l, "team", Policy{Daily: 30}, 1, 5)
	if got[""] != 5 {
		t.Fatalf("outcomes %v with a failing keeper; want all 5 allowed", got)
	}
}

// TestKeeperSyncCanceled: a request whose context ends while it waits for
// the keeper gets the context's error and reserves nothing.
func TestKeeperSyncCanceled(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLocal(t, clk, nil)
	l.SetKeeper(blockedKeeper{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Admit(ctx, Subject{Key: "team"}, Policy{Daily: 30}, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Admit err = %v; want context.Canceled", err)
	}
	if day, _ := l.usage("team", clk.Now()); day != 0 {
		t.Errorf("reserved %d units for a request that never got in; want 0", day)
	}
}

type blockedKeeper struct{}

func (blockedKeeper) Sync(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }

// TestRestore: restored counters of the current windows are charged again;
// those of ended windows are not.
func TestRestore(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLocal(t, clk, nil)
	w := windowAt(t0)
	n := l.Restore([]Counter{
		{Subject: "analytics-team", Day: w.day, DayUsed: 30, Month: w.month, MonthUsed: 30},
		{Subject: "acme-prod", Day: w.day, DayUsed: 212, Month: w.month, MonthUsed: 212},
		{Subject: "yesterday", Day: windowAt(t0.Add(-24 * time.Hour)).day, DayUsed: 9, Month: w.month, MonthUsed: 9},
		{Subject: "last-year", Day: 20251118, DayUsed: 5, Month: 202511, MonthUsed: 5},
	}, clk.Now())
	if n != 3 {
		t.Errorf("Restore = %d subjects; want 3 (last-year's windows have ended)", n)
	}
	for _, tc := range []struct {
		subject    string
		day, month int64
	}{{"analytics-team", 30, 30}, {"acme-prod", 212, 212}, {"yesterday", 0, 9}, {"last-year", 0, 0}} {
		if d, m := l.usage(tc.subject, clk.Now()); d != tc.day || m != tc.month {
			t.Errorf("%s: used %d/%d; want %d/%d", tc.subject, d, m, tc.day, tc.month)
		}
	}
	if got := admitN(t, l, "analytics-team", Policy{Daily: 30, Monthly: 1000}, 1, 1); got[ReasonDaily] != 1 {
		t.Errorf("analytics-team after restore: %v; want refused daily_quota_exceeded", got)
	}
}

// TestPresumeSpent: after PresumeSpent, a subject with no counters is
// refused for the rest of the day (daily) and month (monthly), while a
// restored one keeps its own count; the next month starts from zero.
func TestPresumeSpent(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLocal(t, clk, nil)
	w := windowAt(t0)
	l.Restore([]Counter{{Subject: "known", Day: w.day, DayUsed: 3, Month: w.month, MonthUsed: 3}}, t0)
	l.PresumeSpent(t0)
	p := Policy{Daily: 30, Monthly: 1000}
	if got := admitN(t, l, "unknown", p, 1, 1); got[ReasonMonthly] != 1 {
		t.Errorf("unknown subject: %v; want monthly_quota_exceeded", got)
	}
	u, _ := l.Usage(context.Background(), []KeyPolicy{{Key: "never-seen", Policy: p}})
	if u[0].DayUsed != 30 || u[0].MonthUsed != 1000 {
		t.Errorf("usage of a subject never seen: %d/%d; want 30/1000 (presumed spent)", u[0].DayUsed, u[0].MonthUsed)
	}
	if got := admitN(t, l, "known", p, 1, 1); got[""] != 1 {
		t.Errorf("restored subject: %v; want allowed", got)
	}
	clk.Set(w.monthEnd.Add(time.Hour))
	if got := admitN(t, l, "unknown", p, 1, 1); got[""] != 1 {
		t.Errorf("unknown subject next month: %v; want allowed", got)
	}
}

// TestKeeperCountsByAccount: the keeper stores one counter per account,
// whatever keys reserved it, and a restart restores it for every key of
// the account (a key of its own account is stored under its key).
func TestKeeperCountsByAccount(t *testing.T) {
	clk := clock.NewFake(t0)
	l, _ := newKeptLocal(t, clk)
	ctx := context.Background()
	p := Policy{Daily: 10, Monthly: 100}
	for i, s := range []Subject{{Key: "web", Account: "acme"}, {Key: "batch", Account: "acme"}, {Key: "web", Account: "acme"}, {Key: "solo"}} {
		if d, err := l.Admit(ctx, s, p, 2); err != nil || !d.Allowed {
			t.Fatalf("request %d by %s: allowed %v, err %v", i, s.Key, d.Allowed, err)
		}
	}
	cs := l.Checkpoint(clk.Now(), false)
	got := map[string]int64{}
	for _, c := range cs {
		got[c.Subject] = c.DayUsed
	}
	if len(got) != 2 || got["acme"] != 6 || got["solo"] != 2 {
		t.Fatalf("checkpoint %+v; want acme at 6, solo at 2, nothing per key", cs)
	}

	restarted := newLocal(t, clk, nil)
	if n := restarted.Restore(cs, clk.Now()); n != 2 {
		t.Fatalf("restored %d accounts; want 2", n)
	}
	u, err := restarted.Usage(ctx, []KeyPolicy{{Key: "batch", Account: "acme", Policy: p}, {Key: "new-key", Account: "acme", Policy: p}, {Key: "solo", Policy: p}})
	if err != nil {
		t.Fatal(err)
	}
	if u[0].DayUsed != 6 || u[1].DayUsed != 6 || u[2].DayUsed != 2 {
		t.Errorf("after restart: day used %d, %d, %d; want 6, 6 (the account's), 2", u[0].DayUsed, u[1].DayUsed, u[2].DayUsed)
	}
	if d, _ := restarted.Admit(ctx, Subject{Key: "new-key", Account: "acme"}, p, 5); d.Allowed {
		t.Errorf("a new key of acme after restart: admitted 5 units over 6 of 10 used; want refused")
	}
}

// TestKeeperCheckpointHoldsChangesOnly: a checkpoint with reservations
// holds only the accounts that reserved, waited or were reset since the
// previous one, so an idle limiter's checkpoint is empty whatever the
// number of accounts; CheckpointAll holds them all, never below what was
// stored.
func TestKeeperCheckpointHoldsChangesOnly(t *testing.T) {
	clk := clock.NewFake(t0)
	l, k := newKeptLocal(t, clk)
	ctx := context.Background()
	p := Policy{Daily: 20000, Monthly: 400000}
	for _, acct := range []string{"a", "b", "c"} {
		admitN(t, l, acct, p, 1, 3)
	}
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if cs := l.Checkpoint(clk.Now(), true); len(cs) != 0 {
		t.Errorf("checkpoint with nothing reserved since: %+v; want none", cs)
	}
	admitN(t, l, "b", p, 1, 1) // within b's reservation: no sync
	cs := l.Checkpoint(clk.Now(), true)
	if len(cs) != 1 || cs[0].Subject != "b" || cs[0].DayUsed < 4 {
		t.Errorf("checkpoint after one request of b: %+v; want b alone, at least 4", cs)
	}
	l.Commit(cs)
	if _, err := l.ResetQuota(ctx, "c", QuotaDay); err != nil {
		t.Fatal(err)
	}
	if day, month := k.storedFor("c"); day != 0 || month < 3 {
		t.Errorf("c stored after its day was reset: %d/%d; want 0 and at least 3", day, month)
	}
	all := map[string]Counter{}
	for _, c := range l.CheckpointAll(clk.Now()) {
		all[c.Subject] = c
	}
	if len(all) != 3 || all["b"].DayUsed < 4 || all["a"].DayUsed < 3 || all["c"].DayUsed != 0 {
		t.Errorf("CheckpointAll: %+v; want a, b and c with b at least 4, a at least 3, c's day 0", all)
	}
	if cs := l.Checkpoint(clk.Now(), true); len(cs) != 0 {
		t.Errorf("checkpoint after CheckpointAll: %+v; want none", cs)
	}
}

// TestPeekAllClearsNothing: PeekAll returns every account's counters,
// reserved ahead, and leaves what they reserved, need and changed for the
// next checkpoint, which holds the changed account with the reservation
// PeekAll saw.
func TestPeekAllClearsNothing(t *testing.T) {
	clk := clock.NewFake(t0)
	l, k := newKeptLocal(t, clk)
	p := Policy{Daily: 20000, Monthly: 400000}
	for _, acct := range []string{"a", "b"} {
		admitN(t, l, acct, p, 1, 3)
	}
	if err := k.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	// b reserved 50 units since and a request of 7 waits: its next
	// checkpoint reserves 100 ahead of its 3 used, plus the 7.
	l.mu.Lock()
	q := l.quotas["b"]
	q.recent, q.need = 50, 7
	l.changedLocked("b", q)
	l.mu.Unlock()

	for range 2 { // a second peek sees the same
		peeked := map[string]Counter{}
		for _, c := range l.PeekAll(clk.Now()) {
			peeked[c.Subject] = c
		}
		if len(peeked) != 2 || peeked["a"].DayUsed < 3 || peeked["b"].DayUsed != 110 {
			t.Fatalf("PeekAll: %+v; want a at least 3 and b at 110", peeked)
		}
	}
	cs := l.Checkpoint(clk.Now(), true)
	if len(cs) != 1 || cs[0].Subject != "b" || cs[0].DayUsed != 110 {
		t.Errorf("checkpoint after PeekAll: %+v; want b alone at 110, as peeked", cs)
	}
}

// TestKeeperStoresPresumedSpent: an account that enters a window presumed
// spent (a damaged state file, on_damage: spent) is in the next
// checkpoint, refused requests and all: with only changes stored, a crash
// before a whole write would otherwise forgive its quota.
func TestKeeperStoresPresumedSpent(t *testing.T) {
	clk := clock.NewFake(t0)
	l, _ := newKeptLocal(t, clk)
	l.PresumeSpent(clk.Now())
	if d, err := l.Admit(context.Background(), Subject{Key: "acme"}, Policy{Daily: 30, Monthly: 1000}, 1); err != nil || d.Allowed {
		t.Fatalf("Admit in a window presumed spent: %+v, %v; want refused", d, err)
	}
	cs := l.Checkpoint(clk.Now(), true)
	if len(cs) != 1 || cs[0].DayUsed != 30 || cs[0].MonthUsed != 1000 {
		t.Errorf("checkpoint after a refusal in a window presumed spent: %+v; want acme at 30/1000", cs)
	}
}

// TestPeekAllBesideAdmissions: PeekAll reads the accounts a part at a
// time while other accounts are admitted and added (go test -race): every
// account counted before it began is in what it returns.
func TestPeekAllBesideAdmissions(t *testing.T) {
	clk := clock.NewFake(t0)
	l, _ := newKeptLocal(t, clk)
	ctx := context.Background()
	const before = 3*lockPart + 7
	for i := range before {
		if _, err := l.Admit(ctx, Subject{Key: fmt.Sprintf("old-%05d", i)}, Policy{Daily: 1000}, 2); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			if _, err := l.Admit(ctx, Subject{Key: fmt.Sprintf("new-%05d", i)}, Policy{Daily: 1000}, 1); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	got := map[string]Counter{}
	for _, c := range l.PeekAll(clk.Now()) {
		got[c.Subject] = c
	}
	<-done
	for i := range before {
		if c := got[fmt.Sprintf("old-%05d", i)]; c.DayUsed < 2 {
			t.Fatalf("old-%05d: %+v; want it at 2 or more", i, c)
		}
	}
}

// BenchmarkAdmitDuringPeekAll is admissions of a key with a rate limit
// (they take the lock and nothing else) made back to back while the
// counters of 100,000 accounts are read whole, as a compaction's snapshot
// reads them (PeekAll) and as a whole write's checkpoint does
// (CheckpointAll): admit-max-ms is the longest an admission waited, what
// any request of a limited key waits when it arrives then.
func BenchmarkAdmitDuringPeekAll(b *testing.B) {
	clk := clock.NewFake(t0)
	l, _ := newKeptLocal(b, clk)
	ctx := context.Background()
	for i := range 100_000 {
		if _, err := l.Admit(ctx, Subject{Key: fmt.Sprintf("key-%06d", i)}, Policy{Daily: 1000}, 1); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		read func(time.Time) []Counter
	}{
		{"PeekAll", l.PeekAll},
		{"CheckpointAll", l.CheckpointAll},
	} {
		b.Run(bc.name, func(b *testing.B) {
			admitDuring(b, l, func() {
				if n := len(bc.read(clk.Now())); n != 100_000 {
					b.Fatalf("%d counters; want 100,000", n)
				}
			})
		})
	}
}
