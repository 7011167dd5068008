package redistest

import (
	"strings"
	"testing"
)

// A start counts only when the process started answers: another
// redis-server already on the port (two cluster nodes given one port)
// must fail the start, not pass for it.
func TestAwaitPingChecksTheProcess(t *testing.T) {
	s := StartServer(t, false)
	pid := s.cmd.Process.Pid
	if err := awaitPing(s.Addr(), pid, serverWait, s.exited); err != nil {
		t.Fatalf("the server's own pid: %v", err)
	}
	err := awaitPing(s.Addr(), pid+1, serverWait, make(chan struct{}))
	if err == nil || !strings.Contains(err.Error(), "port taken") {
		t.Fatalf("another pid: error %v; want port taken", err)
	}
}

// freeClusterPort never returns a port the cluster's other nodes have:
// of 200 drawn from its 2,768, about 7 would repeat without the check.
func TestFreeClusterPortSkipsTaken(t *testing.T) {
	var taken []int
	for range 200 {
		p := freeClusterPort(t, taken)
		for _, q := range taken {
			if p == q {
				t.Fatalf("port %d returned twice", p)
			}
		}
		taken = append(taken, p)
	}
}

func TestInfoField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nprocess_id:4242\r\nrun_id:abc\r\n"
	if v, ok := infoField(info, "process_id"); !ok || v != "4242" {
		t.Errorf("process_id: %q, %v; want 4242", v, ok)
	}
	if _, ok := infoField(info, "process"); ok {
		t.Errorf("a prefix of a field name matched")
	}
}
