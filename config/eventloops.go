package config

import (
	"fmt"
	"runtime"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// EventLoops is server.event_loops: a number of event loops, or
// LoopsAuto.
type EventLoops int

// LoopsAuto is server.event_loops: auto, the default: a loop for each
// processor the runtime started with wherever loops can serve (see
// Config.LoopCount), and none elsewhere.
const LoopsAuto EventLoops = -1

// startProcs is the number of processors the runtime started with. The
// loops raise GOMAXPROCS (h1.Server.Loops), so auto counts from this
// rather than the current value, and a process that builds its listener
// twice (a test) gets the same count each time.
var startProcs = runtime.GOMAXPROCS(0)

// UnmarshalYAML reads auto or a count; validation bounds the count.
func (n *EventLoops) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.ScalarNode && node.Value == "auto" {
		*n = LoopsAuto
		return nil
	}
	var i int
	if err := node.Decode(&i); err != nil || i < 0 {
		return fmt.Errorf("want auto or a number of loops (0: a goroutine per connection), got `%s` (line %d)", node.Value, node.Line)
	}
	*n = EventLoops(i)
	return nil
}

// MarshalYAML writes auto or the count, as the file would hold it.
func (n EventLoops) MarshalYAML() (any, error) {
	if n == LoopsAuto {
		return "auto", nil
	}
	return int(n), nil
}

// String returns auto or the count.
func (n EventLoops) String() string {
	if n == LoopsAuto {
		return "auto"
	}
	return strconv.Itoa(int(n))
}

// LoopCount returns how many event loops serve the public listener's
// HTTP/1.1, plain or over TLS: none where loops cannot serve (not Linux,
// server.fast_http1 off), server.event_loops where it is a count, and for
// auto a loop for each processor the runtime started with, except in
// cluster mode, where every request's limits run in Redis and would take
// it off its loop.
func (c *Config) LoopCount() int {
	n := c.Server.EventLoops
	switch {
	case runtime.GOOS != "linux", !c.Server.FastHTTP1Enabled():
		return 0
	case n != LoopsAuto:
		return max(int(n), 0)
	case c.ClusterMode():
		return 0
	}
	return min(startProcs, maxEventLoops)
}
