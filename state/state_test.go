package state

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
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
		Counters: []limits.Counter{ // by subject, as Load returns them
			{Subject: "acme-prod", Day: 20261118, DayUsed: 212, Month: 202611, MonthUsed: 212},
			{Subject: "analytics-team", Day: 20261118, DayUsed: 30, Month: 202611, MonthUsed: 30},
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
// a state file is either refused whole (never read in part) or, where it
// falls in the last record, drops that record as a torn write: what loads
// is then exactly the state before it, never a changed count.
func TestDamagedIsDetected(t *testing.T) {
	before := sample()
	after := sample()
	after.Written = t0.Add(time.Second)
	after.Counters[0].DayUsed = 400
	change := Snapshot{Written: after.Written, Counters: after.Counters[:1]}
	snapOnly := encode(before)
	good := appendRecord(slices.Clone(snapOnly), kindChanges, change)

	normalize := func(s Snapshot) Snapshot { s.Written = s.Written.UTC(); return s }
	if got, info, err := decode(good); err != nil || info.Records != 2 || !reflect.DeepEqual(normalize(got), after) {
		t.Fatalf("whole journal: %+v %+v %v; want %+v in 2 records", got, info, err, after)
	}
	for n := range len(good) {
		got, info, err := decode(good[:n])
		switch {
		case n <= len(snapOnly)-1:
			if err == nil {
				t.Fatalf("file cut to %d bytes, inside its snapshot: decoded", n)
			}
		case err != nil:
			t.Fatalf("file cut to %d bytes, inside its last record: %v; want that record dropped", n, err)
		case !reflect.DeepEqual(normalize(got), before) || info.Torn != n-len(snapOnly):
			t.Fatalf("file cut to %d bytes: %+v, %d bytes torn; want the snapshot alone, %d torn", n, got, info.Torn, n-len(snapOnly))
		}
	}
	for i := range good {
		b := slices.Clone(good)
		b[i] ^= 0x20
		got, _, err := decode(b)
		switch {
		case i < len(snapOnly):
			if err == nil {
				t.Fatalf("file with byte %d (in its snapshot) changed decoded", i)
			}
		case err == nil && !reflect.DeepEqual(normalize(got), before):
			t.Fatalf("file with byte %d (in its last record) changed: %+v; want the record dropped", i, got)
		}
	}
	// A damaged record with another after it is damage, not a torn write.
	three := appendRecord(slices.Clone(good), kindChanges, change)
	three[len(snapOnly)+7] ^= 0x01
	if _, _, err := decode(three); err == nil || !strings.Contains(err.Error(), "record 2") {
		t.Errorf("a damaged middle record: %v; want an error naming record 2", err)
	}
	if _, _, err := decode(append(slices.Clone(good), 0)); err != nil {
		t.Errorf("a zero byte appended (space never written): %v; want it dropped", err)
	}

	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, snapOnly[:len(snapOnly)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrDamaged) {
		t.Errorf("Load of a truncated file: %v; want ErrDamaged", err)
	}
	if _, err := Load(path + ".missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: %v; want fs.ErrNotExist", err)
	}
}

// encodeOne is the version 1 (whole file) format of earlier releases.
func encodeOne(s Snapshot) []byte {
	p := appendPayload(nil, s)
	b := append([]byte(magic), versionOne)
	b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
	b = append(b, p...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// TestVersionOneIsRead: a file of the earlier whole-file format loads, and
// any damage to it is refused whole, as before.
func TestVersionOneIsRead(t *testing.T) {
	old := encodeOne(sample())
	got, info, err := decode(old)
	if err != nil || info.Version != 1 {
		t.Fatalf("version 1 file: %v, version %d", err, info.Version)
	}
	got.Written = got.Written.UTC()
	if !reflect.DeepEqual(got, sample()) {
		t.Errorf("version 1 file: %+v; want %+v", got, sample())
	}
	for n := range len(old) {
		if _, _, err := decode(old[:n]); err == nil {
			t.Fatalf("version 1 file cut to %d of %d bytes decoded", n, len(old))
		}
	}
	for i := range old {
		b := slices.Clone(old)
		b[i] ^= 0x20
		if _, _, err := decode(b); err == nil {
			t.Fatalf("version 1 file with byte %d changed decoded", i)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encode(sample()))                                                   // a whole file
	f.Add(appendRecord(encode(sample()), kindChanges, Snapshot{Written: t0})) // a snapshot and an empty change
	f.Add(encode(Snapshot{}))                                                 // an empty state
	f.Add(encodeOne(sample()))                                                // the version 1 format
	f.Add([]byte("tgstate\x02"))                                              // a header alone
	f.Fuzz(func(t *testing.T, b []byte) {
		s, _, err := decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must survive a whole rewrite unchanged.
		again, _, err := decode(encode(s))
		if err != nil {
			t.Fatalf("rewritten whole: %v", err)
		}
		if !reflect.DeepEqual(again.Counters, s.Counters) || len(again.Usage) != len(s.Usage) {
			t.Errorf("rewritten whole: %+v; want %+v", again, s)
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
	var usage activity.Keys
	key := usage.Retain([]string{"acme-prod"})["acme-prod"]
	s := New(Options{Path: path, Counters: lim, Clock: clk, Usage: &usage})
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
