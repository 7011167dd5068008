package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trendgate/state"
)

// TestStateCheckAndReset: state check says whether the file of state.path
// is whole; state reset moves a damaged one aside, after which check finds
// none and a start begins from zero.
func TestStateCheckAndReset(t *testing.T) {
	dir := t.TempDir()
	statePath := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "trendgate.yaml")
	if err := os.WriteFile(cfg, []byte("state:\n  path: "+statePath+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(statePath, []byte("tgstate\x01garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run([]string{"state", "check", "-config", cfg}, nil, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "trendgate state reset") {
		t.Fatalf("state check of a damaged file: %v; want an error naming the damage and the reset command", err)
	}
	out.Reset()
	if err := run([]string{"state", "reset", cfg}, nil, &out, &out); err != nil {
		t.Fatalf("state reset: %v", err)
	}
	if !strings.Contains(out.String(), "moved to "+statePath+".damaged-") {
		t.Errorf("state reset said %q; want where the file went", out.String())
	}
	if aside, _ := filepath.Glob(statePath + ".damaged-*"); len(aside) != 1 {
		t.Errorf("files set aside: %v; want one", aside)
	}
	out.Reset()
	if err := run([]string{"state", "check", cfg}, nil, &out, &out); err != nil || !strings.Contains(out.String(), "no state file yet") {
		t.Errorf("state check after reset: %v %q; want no state file yet", err, out.String())
	}
	if err := run([]string{"state", "frobnicate"}, nil, &out, &out); err == nil {
		t.Error("state frobnicate accepted")
	}
	out.Reset()
	if err := run([]string{"state", "-help"}, nil, &out, &out); err != nil || !strings.Contains(out.String(), "trendgate state reset") {
		t.Errorf("state -help: %v %q", err, out.String())
	}
}

// TestStateCheckWholeFile: state check reads the journal a gateway
// writes and says its format, records and size.
func TestStateCheckWholeFile(t *testing.T) {
	dir := t.TempDir()
	statePath := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "trendgate.yaml")
	if err := os.WriteFile(cfg, []byte("state:\n  path: "+statePath+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := state.New(state.Options{Path: statePath})
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"state", "check", cfg}, nil, &out, &out); err != nil {
		t.Fatalf("state check: %v", err)
	}
	if got := out.String(); !strings.Contains(got, ": ok, written") || !strings.Contains(got, "format version 2: 1 record,") {
		t.Errorf("state check said %q; want ok, format version 2: 1 record", got)
	}
}
