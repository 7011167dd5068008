package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"trendgate/config"
	"trendgate/state"
)

const stateUsage = `Usage:
  trendgate state check [-config] FILE   read the state file of FILE's state.path and say
                                         whether it is whole (exit 1 when damaged)
  trendgate state reset [-config] FILE   move that state file aside (to
                                         <path>.damaged-<UTC time>), so the next start
                                         begins from zero; stop the gateway first
`

// runState is `trendgate state check|reset`: what an operator runs when the
// gateway refuses to start on a damaged state file.
func runState(args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "check" && args[0] != "reset") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fmt.Fprint(stdout, stateUsage)
			return nil
		}
		return errors.New("usage: trendgate state check|reset [-config] FILE (see trendgate state -help)")
	}
	cmd := args[0]
	use := "trendgate state " + cmd + " [-config] FILE"
	fs := newFlags("state "+cmd, "Usage: "+use+"\n")
	flagPath := fs.String("config", "", "configuration `FILE` (or give it as the argument)")
	pos, help, err := parseArgs(fs, args[1:], stdout)
	if help || err != nil {
		return err
	}
	path, err := configFile(*flagPath, pos, use)
	if err != nil {
		return fmt.Errorf("state %s: %w", cmd, err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	sp := cfg.State.Path
	if sp == "" {
		return fmt.Errorf("state %s: %s sets no state.path: there is no state file", cmd, path)
	}
	if cmd == "reset" {
		return resetState(sp, stdout)
	}
	return checkState(sp, stdout)
}

func checkState(path string, stdout io.Writer) error {
	snap, info, err := state.LoadInfo(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(stdout, "%s: no state file yet (the next start begins from zero)\n", path)
		return nil
	case errors.Is(err, state.ErrDamaged):
		return fmt.Errorf("%w (trendgate state reset moves it aside)", err)
	case err != nil:
		return err
	}
	records := "records"
	if info.Records == 1 {
		records = "record"
	}
	fmt.Fprintf(stdout, "%s: ok, written %s: %d quota subjects, %d keys with usage (format version %d: %d %s, %d bytes)\n",
		path, snap.Written.UTC().Format(time.RFC3339), len(snap.Counters), len(snap.Usage), info.Version, info.Records, records, info.Bytes)
	if info.Torn > 0 {
		fmt.Fprintf(stdout, "%s: its last %d bytes are a record a crash cut short; the next start drops it\n", path, info.Torn)
	}
	if info.Version != state.FormatVersion {
		fmt.Fprintf(stdout, "%s: the next start reads this format once and writes the current one\n", path)
	}
	return nil
}

func resetState(path string, stdout io.Writer) error {
	aside, err := state.Reset(path, time.Now())
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(stdout, "%s: no state file; nothing to reset\n", path)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s moved to %s; the next start begins with every quota counter at zero\n", path, aside)
	return nil
}
