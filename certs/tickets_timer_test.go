package certs

import (
	"context"
	"crypto/tls"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// TestTicketKeysRefreshOnItsTicker: a running refresher loads the new
// day's keys within ticketRefreshEvery of the day turning, and not
// before. The refresher's ticker and clock.Real both run on the bubble's
// fake time (testing/synctest), which starts at a UTC midnight, so the
// sleeps below take no wall time; Redis runs on real time.
func TestTicketKeysRefreshOnItsTicker(t *testing.T) {
	rdb := redistest.Client(t, redistest.Addr)
	prefix := redistest.Prefix(t, rdb)
	synctest.Test(t, func(t *testing.T) {
		brdb := redis.NewClient(&redis.Options{Addr: redistest.Addr})
		defer func() { _ = brdb.Close() }()
		st := newSharedTickets(brdb, prefix, clock.Real{}, zap.NewNop(), nil, &tls.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		if err := st.refresh(ctx); err != nil {
			t.Fatal(err)
		}
		day := dayOf(time.Now())
		// Started off the minute, so that a slower ticker's ticks would
		// miss the checks below.
		time.Sleep(ticketRefreshEvery + ticketRefreshEvery/2)
		done := make(chan struct{})
		go func() { defer close(done); st.run(ctx) }()
		defer func() { cancel(); <-done }()

		// made reports whether the day d's key is in Redis: the load for
		// day d-1 makes it a day ahead.
		made := func(d int64) bool {
			n, err := rdb.Exists(context.Background(), ticketPrefix(prefix)+strconv.FormatInt(d, 10)).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		}
		loaded := func() int64 {
			st.mu.Lock()
			defer st.mu.Unlock()
			return st.loaded
		}
		if !made(day) || !made(day+1) || made(day+2) {
			t.Fatalf("after the first load: days %d, %d, %d made %v, %v, %v; want the first two only",
				day, day+1, day+2, made(day), made(day+1), made(day+2))
		}

		untilMidnight := time.Until(time.Unix((day+1)*int64(ticketPeriod/time.Second), 0))
		time.Sleep(untilMidnight - time.Second)
		synctest.Wait()
		if made(day+2) || loaded() != day {
			t.Fatalf("a second before the day turns: loaded day %d, day %d's key made %v; want day %d, not made", loaded(), day+2, made(day+2), day)
		}

		time.Sleep(time.Second + ticketRefreshEvery)
		synctest.Wait()
		if !made(day+2) || loaded() != day+1 {
			t.Errorf("%v after the day turned: loaded day %d, day %d's key made %v; want day %d, made", ticketRefreshEvery, loaded(), day+2, made(day+2), day+1)
		}
	})
}
