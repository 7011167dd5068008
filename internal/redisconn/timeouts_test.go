package redisconn

import (
	"testing"
	"time"
)

// TestTimeouts holds the Redis timeouts' values, so that changing one is
// a decision made here, and the order between them that the paths rely on.
func TestTimeouts(t *testing.T) {
	values := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"CommandTimeout", CommandTimeout, 50 * time.Millisecond},
		{"BudgetTimeout", BudgetTimeout, 200 * time.Millisecond},
		{"KeyStoreTimeout", KeyStoreTimeout, time.Second},
		{"StartupTimeout", StartupTimeout, 2 * time.Second},
		{"CertTimeout", CertTimeout, 2 * time.Second},
		{"CertReleaseTimeout", CertReleaseTimeout, 5 * time.Second},
		{"SnapshotTimeout", SnapshotTimeout, 10 * time.Second},
	}
	for _, v := range values {
		if v.got != v.want {
			t.Errorf("%s = %s; want %s", v.name, v.got, v.want)
		}
	}

	order := []struct {
		rule        string
		short, long time.Duration
	}{
		{"a cold miss may wait for the budget longer than a hit waits for a command", CommandTimeout, BudgetTimeout},
		{"the certificate floor lies above redis.timeout's default", CommandTimeout, CertTimeout},
		{"a key store command may wait longer than a request-path command", CommandTimeout, KeyStoreTimeout},
		{"a whole key snapshot may take longer than one key store command", KeyStoreTimeout, SnapshotTimeout},
	}
	for _, o := range order {
		if o.short >= o.long {
			t.Errorf("%s: %s >= %s", o.rule, o.short, o.long)
		}
	}
}
