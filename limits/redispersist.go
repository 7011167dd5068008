package limits

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Persistence is what a Redis keeps on disk, as CONFIG GET reports it.
// The zero value is unknown.
type Persistence struct {
	// Known is false when CONFIG GET was refused (managed Redis services
	// and ACLs often forbid it) or Redis did not answer; Why says which.
	Known bool
	Why   string
	// AOF is appendonly yes; Save the RDB snapshot rules ("" for none).
	AOF  bool
	Save string
}

// Keeps names what survives a restart of that Redis: "aof", "rdb",
// "aof+rdb", "nothing", or "unknown (<why>)".
func (p Persistence) Keeps() string {
	switch {
	case !p.Known:
		return "unknown (" + p.Why + ")"
	case p.AOF && p.Save != "":
		return "aof+rdb"
	case p.AOF:
		return "aof"
	case p.Save != "":
		return "rdb"
	}
	return "nothing"
}

// KeepsNothing reports whether that Redis is known to keep nothing on
// disk: a restart of it empties it.
func (p Persistence) KeepsNothing() bool { return p.Known && !p.AOF && p.Save == "" }

// ReadPersistence asks rdb (on a Redis Cluster, whichever node answers)
// for its appendonly and save settings.
func ReadPersistence(ctx context.Context, rdb redis.UniversalClient) Persistence {
	aof, err := configGet(ctx, rdb, "appendonly")
	if err != nil {
		return Persistence{Why: err.Error()}
	}
	save, err := configGet(ctx, rdb, "save")
	if err != nil {
		return Persistence{Why: err.Error()}
	}
	return Persistence{Known: true, AOF: strings.EqualFold(aof, "yes"), Save: strings.TrimSpace(save)}
}

func configGet(ctx context.Context, rdb redis.UniversalClient, name string) (string, error) {
	m, err := rdb.ConfigGet(ctx, name).Result()
	if err != nil {
		return "", fmt.Errorf("CONFIG GET %s: %w", name, err)
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("CONFIG GET %s: not reported", name)
	}
	return v, nil
}
