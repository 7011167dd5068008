package redisconn

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestCheckAndNew(t *testing.T) {
	tests := []struct {
		name, url, mode string
		cluster         bool
		err             string // "" means valid
	}{
		{"single", "redis://127.0.0.1:6379/0", "", false, ""},
		{"single with options", "rediss://u:hunter2@h:6380/3?dial_timeout=1s", "", false, ""},
		{"cluster by addr", "redis://a:7000?addr=b:7001&addr=c:7002", "", true, ""},
		{"cluster through one seed", "redis://a:7000/0", "cluster", true, ""},
		{"cluster with a database", "redis://a:7000/1?addr=b:7001", "", true, "only database 0"},
		{"addr in single mode", "redis://a:6379?addr=b:6379", "single", false, "needs redis.mode cluster"},
		{"addr without port", "redis://a:7000?addr=b", "", true, "each addr= must be host:port"},
		{"addr port out of range", "redis://a:7000?addr=b:70000", "", true, "each addr= port"},
		{"unknown option", "redis://a:6379/0?dial_timout=1s", "", false, "query option"},
		{"unknown option on a cluster", "redis://a:7000?addr=b:7001&db=2", "", true, "query option"},
		{"scheme", "http://u:hunter2@a:6379", "", false, "must start with redis://"},
		{"bad mode", "redis://a:6379", "sharded", false, "mode must be"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.url, tc.mode)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Check: got %v; want nil", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Check: got %v; want an error containing %q", err, tc.err)
			case err != nil && strings.Contains(err.Error(), "hunter2"):
				t.Errorf("Check echoes the password: %v", err)
			}
			if tc.err != "" {
				return
			}
			if got := IsCluster(tc.url, tc.mode); got != tc.cluster {
				t.Errorf("IsCluster: got %v; want %v", got, tc.cluster)
			}
			c, err := New(tc.url, tc.mode, Tuning{NoRetries: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			switch cc := c.(type) {
			case *redis.ClusterClient:
				if !tc.cluster {
					t.Errorf("New: got a cluster client; want a single one")
				}
			case *redis.Client:
				if tc.cluster {
					t.Errorf("New: got a single client; want a cluster one")
				}
				o, err := redis.ParseURL(tc.url)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := cc.Options().DB, o.DB; got != want {
					t.Errorf("New: DB %d; want %d (the URL's)", got, want)
				}
				if got := cc.Options().MaxRetries; got != 0 { // go-redis stores -1 (no retries) as 0
					t.Errorf("New: MaxRetries %d; want 0 (NoRetries)", got)
				}
			}
		})
	}
}
