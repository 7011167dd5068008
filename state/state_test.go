package state

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"trendgate/activity"
	"trendgate/api"
	"trendgate/internal/clock"
	"trendgate/limits"
)

var t0 = time.Date(2026, 11, 18, 15, 0, 0, 0, time.UTC)

func sample() Snapshot {
	hour := uint64(t0.Unix() / 3600)
	return Snapshot{
		Written: t0,
		Counters: []limits.Counter{
			{Subject: "analytics-team", Day: 20261118, DayUsed: 30, Month: 202611, MonthUsed: 30},
			{Subject: "acme-prod", Day: 20261118, DayUsed: 212, Month: 202611, MonthUsed: 212},
		},
		Usage: map[string]activity.KeyRecord{
			"acme-prod": {
				LastSeen: t0.Add(-time.Minute),
				Cells:    []activity.Cell{{Hour: hour, Endpoint: api.EndpointSeries, Class: activity.Class2xx, Requests: 212, Units: 212}},
				Hours:    []activity.HourCount{{Hour: hour - 1, Upstream: 4, Abandon: 1}},
			},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	want := sample()
	if _, err := write(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got.Written = got.Written.UTC()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load = %+v\nwant %+v", got, want)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", fi.Mode().Perm())
	}
}

// TestDamagedIsDetected: every truncation and every single-byte change of
// a state file is refused whole, never read in part.
func TestDamagedIsDetected(t *testing.T) {
	good := encode(sample())
	for n := range len(good) {
		if _, err := decode(good[:n]); err == nil {
			t.Fatalf("file truncated to %d of %d bytes decoded", n, len(good))
		}
	}
	for i := range good {
		b := append([]byte(nil), good...)
		b[i] ^= 0x20
		if _, err := decode(b); err == nil {
			t.Fatalf("file with byte %d changed decoded", i)
		}
	}
	if _, err := decode(append(append([]byte(nil), good...), 0)); err == nil {
		t.Fatal("file with a byte appended decoded")
	}
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, good[:len(good)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrDamaged) {
		t.Errorf("Load of a truncated file: %v; want ErrDamaged", err)
	}
	if _, err := Load(path + ".missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: %v; want fs.ErrNotExist", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encode(sample()))      // a whole file
	f.Add(encode(Snapshot{}))    // an empty state
	f.Add([]byte("tgstate\x01")) // a header cut short
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must encode back to the same bytes.
		if again := encode(s); len(s.Usage) <= 1 && string(again) != string(b) {
			t.Errorf("decode then encode changed the file")
		}
	})
}

func TestReset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	aside, err := Reset(path, t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := path + ".damaged-20261118T150000Z"; aside != want {
		t.Errorf("moved to %s; want %s", aside, want)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Reset the state file is still there: %v", err)
	}
	if _, err := Reset(path, t0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Reset of no file: %v; want fs.ErrNotExist", err)
	}
}

// TestStoreSyncAndClose drives a Store with a real limiter: Sync stores a
// reservation ahead, Close the exact counts, and a limiter restored from
// the file has them.
func TestStoreSyncAndClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	clk := clock.NewFake(t0)
	lim, err := limits.NewLocal(limits.DefaultConfig(), clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	var key activity.Key
	s := New(Options{Path: path, Counters: lim, Clock: clk,
		Usage: func() map[string]*activity.Key { return map[string]*activity.Key{"acme-prod": &key} }})
	lim.SetKeeper(s)
	s.Start()
	p := limits.Policy{Daily: 20000, Monthly: 400000}
	for range 212 {
		if d, err := lim.Admit(context.Background(), limits.Subject{Key: "acme-prod"}, p, 1); err != nil || !d.Allowed {
			t.Fatalf("Admit: %v %v", d.Allowed, err)
		}
		key.Record(clk.Now(), api.EndpointSeries, 200, 1)
	}
	mid, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c := mid.Counters[0]; c.DayUsed < 212 || c.DayUsed > 212+200 {
		t.Errorf("stored while running: %d; want 212 plus a reservation of at most 200 (1%% of 20000)", c.DayUsed)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close: %v; want ErrClosed", err)
	}
	end, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c := end.Counters[0]; c.DayUsed != 212 || c.MonthUsed != 212 {
		t.Errorf("stored at Close: %d/%d; want exactly 212/212", c.DayUsed, c.MonthUsed)
	}
	if w := end.Usage["acme-prod"]; len(w.Cells) != 1 || w.Cells[0].Requests != 212 || !w.LastSeen.Equal(t0) {
		t.Errorf("usage stored at Close: %+v; want 212 series requests last seen at %v", w, t0)
	}

	again, _ := limits.NewLocal(limits.DefaultConfig(), clk, nil)
	again.Restore(end.Counters, clk.Now())
	u, _ := again.Usage(context.Background(), []limits.KeyPolicy{{Key: "acme-prod", Policy: p}})
	if u[0].DayUsed != 212 {
		t.Errorf("restored limiter: %d used; want 212", u[0].DayUsed)
	}
	var restored activity.Key
	restored.Restore(end.Usage["acme-prod"], clk.Now())
	if w := restored.Window(clk.Now()); w.Requests != 212 || !w.LastSeen.Equal(t0) {
		t.Errorf("restored usage: %d requests last seen %v; want 212 at %v", w.Requests, w.LastSeen, t0)
	}
}

// TestLock: a second holder of one state file's lock is refused until the
// first lets go.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	unlock, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(path); !errors.Is(err, ErrLocked) {
		t.Errorf("second Lock: %v; want ErrLocked", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	again, err := Lock(path)
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	_ = again()
}

// TestResetSurvivesRestart: a quota reset is on disk when ResetQuota
// returns, so neither a crash (the file as the running store left it) nor
// a clean stop and restart brings the cleared count back; the other window
// and other accounts keep theirs.
func TestResetSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	clk := clock.NewFake(t0)
	lim, err := limits.NewLocal(limits.DefaultConfig(), clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Path: path, Counters: lim, Clock: clk})
	lim.SetKeeper(s)
	s.Start()
	ctx := context.Background()
	p := limits.Policy{Daily: 20000, Monthly: 400000}
	for i := range 350 {
		sub := limits.Subject{Key: "acme-web", Account: "acme"}
		if i%7 == 0 {
			sub = limits.Subject{Key: "solo"}
		}
		if d, err := lim.Admit(ctx, sub, p, 1); err != nil || !d.Allowed {
			t.Fatalf("Admit: %v %v", d.Allowed, err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	cleared, err := lim.ResetQuota(ctx, "acme", limits.QuotaDay)
	if err != nil || cleared != 300 {
		t.Fatalf("ResetQuota = %d, %v; want 300, nil", cleared, err)
	}

	stored := func(when string, snap Snapshot) map[string]limits.Counter {
		t.Helper()
		m := map[string]limits.Counter{}
		for _, c := range snap.Counters {
			m[c.Subject] = c
		}
		if c := m["acme"]; c.DayUsed != 0 || c.MonthUsed < 300 {
			t.Errorf("%s: acme stored at %d/%d; want 0 and at least 300 (the month untouched)", when, c.DayUsed, c.MonthUsed)
		}
		if c := m["solo"]; c.DayUsed < 50 {
			t.Errorf("%s: solo stored at %d; want at least 50", when, c.DayUsed)
		}
		return m
	}
	crash, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	stored("while running (a crash)", crash)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	end, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c := stored("at Close", end)["acme"]; c.MonthUsed != 300 {
		t.Errorf("at Close: acme's month stored at %d; want exactly 300", c.MonthUsed)
	}
	again, _ := limits.NewLocal(limits.DefaultConfig(), clk, nil)
	again.Restore(end.Counters, clk.Now())
	u, _ := again.Usage(ctx, []limits.KeyPolicy{{Key: "acme-web", Account: "acme", Policy: p}, {Key: "solo", Policy: p}})
	if u[0].DayUsed != 0 || u[0].MonthUsed != 300 || u[1].DayUsed != 50 {
		t.Errorf("after the restart: acme %d/%d, solo %d; want 0/300, 50", u[0].DayUsed, u[0].MonthUsed, u[1].DayUsed)
	}
}
