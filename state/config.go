package state

import (
	"errors"
	"fmt"
	"time"
)

// What the gateway does when the state file is damaged (Config.OnDamage).
const (
	// OnDamageRefuse: refuse to start, naming the file and the command that
	// moves it aside (trendgate state reset).
	OnDamageRefuse = "refuse"
	// OnDamageSpent: start with every quota of the current day and month
	// spent, since the counters that could not be read are unknown.
	OnDamageSpent = "spent"
)

// DefaultFlushInterval is how often the state is written when
// Config.FlushInterval is 0.
const DefaultFlushInterval = time.Second

// Config configures the state file. The zero value is off.
type Config struct {
	// Path is the state file; empty (the default) keeps everything in
	// memory, so a restart forgets quota counters and usage. Its directory
	// must exist. Read at start only.
	Path string `yaml:"path"`
	// FlushInterval is how often what changed is appended to the state
	// file (default 1s); nothing changed writes nothing. A crash loses at
	// most this much of the 24-hour usage; quota counters are written
	// ahead of use (see docs/restarts.md).
	FlushInterval time.Duration `yaml:"flush_interval"`
	// OnDamage is what a damaged state file does at start: "refuse" (the
	// default) or "spent".
	OnDamage string `yaml:"on_damage"`
}

// DefaultConfig returns the defaults: off, flushed every second once on,
// refusing a damaged file.
func DefaultConfig() Config {
	return Config{FlushInterval: DefaultFlushInterval, OnDamage: OnDamageRefuse}
}

// Validate reports every problem in c, one per line.
func (c Config) Validate() error {
	var errs []error
	if c.FlushInterval < 10*time.Millisecond || c.FlushInterval > time.Minute {
		errs = append(errs, fmt.Errorf("flush_interval: %v is outside 10ms..1m", c.FlushInterval))
	}
	if c.OnDamage != OnDamageRefuse && c.OnDamage != OnDamageSpent {
		errs = append(errs, fmt.Errorf("on_damage: %q is not %q or %q", c.OnDamage, OnDamageRefuse, OnDamageSpent))
	}
	return errors.Join(errs...)
}
