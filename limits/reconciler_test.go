package limits

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/internal/clock"
)

// TestReconcilerReplaysOnItsTicker drives the background reconciler with
// the bubble's fake time (testing/synctest): a journal entry waits until
// reconcile_every has passed, is then replayed once without any call to
// Reconcile, and no wall time passes while the test waits for it.
func TestReconcilerReplaysOnItsTicker(t *testing.T) {
	c := redisOrSkip(t, sharedRedis)
	prefix := testPrefix(t, c)
	// Windows of the real today: Redis expires the counters on its own
	// clock, at the end of the window they count.
	now := time.Now().UTC()
	day, month := now.Year()*10000+int(now.Month())*100+now.Day(), now.Year()*100+int(now.Month())
	synctest.Test(t, func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: sharedRedis})
		defer rdb.Close()
		fb, err := NewLocal(DefaultConfig(), clock.Real{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		const every = 5 * time.Second
		r, err := NewRedis(rdb, RedisOptions{Prefix: prefix, Timeout: time.Second, ReconcileEvery: every}, fb, clock.Real{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()

		// What the fallback would have journaled while Redis was away.
		r.journal("k", Decision{Day: day, DayReserved: 3, Month: month, MonthReserved: 3}, +1)
		dayKey := prefix + "q:d:k:" + strconv.Itoa(day)

		time.Sleep(every - time.Millisecond)
		synctest.Wait()
		if got := r.JournalLen(); got != 2 {
			t.Fatalf("journal before reconcile_every: got %d entries; want 2 (not replayed yet)", got)
		}
		if got := counter(t, rdb, dayKey); got != 0 {
			t.Fatalf("day counter before reconcile_every: got %d; want 0", got)
		}

		time.Sleep(time.Millisecond) // the ticker fires
		synctest.Wait()              // the replay's Redis round trips finish
		if got := r.JournalLen(); got != 0 {
			t.Errorf("journal after reconcile_every: got %d entries; want 0", got)
		}
		if got := counter(t, rdb, dayKey); got != 3 {
			t.Errorf("day counter after the replay: got %d; want 3", got)
		}

		time.Sleep(3 * every) // later ticks find nothing to replay
		synctest.Wait()
		if got := counter(t, rdb, dayKey); got != 3 {
			t.Errorf("day counter after later ticks: got %d; want 3 (replayed once)", got)
		}
	})
}
