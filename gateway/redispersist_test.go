package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"trendgate/gateway/gatewaytest"
)

// TestRedisPersistenceWarned: the shared test Redis keeps nothing on disk
// (appendonly no, save ""), so a cluster gateway with quotas (the default
// plans have them) warns at start that a Redis restart resets them, and
// /readyz's details say what the counters depend on.
func TestRedisPersistenceWarned(t *testing.T) {
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 1})
	h := c.Nodes[0]
	keeps := readyDetails(t, h.Admin)
	if keeps["quota_counters"] != "redis" {
		t.Errorf("details %v; want quota_counters redis", keeps)
	}
	switch keeps["redis_persistence"] {
	case "nothing":
		if !strings.Contains(h.Logs.String(), "a restart of that Redis resets every daily and monthly quota") {
			t.Errorf("no warning about a Redis that keeps nothing; logs:\n%s", h.Logs)
		}
	case "":
		t.Errorf("details %v; want redis_persistence", keeps)
	default:
		t.Skipf("the test Redis keeps %q on disk; the warning is for one that keeps nothing", keeps["redis_persistence"])
	}
}

// TestReadyDetailsSingleInstance: without Redis, /readyz says whether the
// counters are in a state file or only in memory.
func TestReadyDetailsSingleInstance(t *testing.T) {
	h := gatewaytest.New(t, nil)
	if got := readyDetails(t, h.Admin)["quota_counters"]; got != "memory (a restart resets them)" {
		t.Errorf("quota_counters %q; want memory", got)
	}
}

func readyDetails(t *testing.T, admin string) map[string]string {
	t.Helper()
	resp, err := http.Get(admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Details map[string]string `json:"details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.Details
}
