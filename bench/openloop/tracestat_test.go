package main

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"runtime"
	rtrace "runtime/trace"
	"testing"
)

// TestReadTraceRequests traces a loopback ping-pong: a server goroutine
// that reads one small request and writes its answer, as a lane does, for
// a client that sends the next only when the last was answered. Each
// request is then one run of the server's goroutine (woken by the
// network, a read, a write, parked on the network again), and the summary
// must count them with their time split between user code and system
// calls.
func TestReadTraceRequests(t *testing.T) {
	const requests = 200
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		answer := bytes.Repeat([]byte("a"), 4096)
		for {
			if _, err := io.ReadFull(c, buf[:8]); err != nil {
				served <- nil // the client closed
				return
			}
			if _, err := c.Write(answer); err != nil {
				served <- err
				return
			}
		}
	}()

	var out bytes.Buffer
	if err := rtrace.Start(&out); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		rtrace.Stop()
		t.Fatal(err)
	}
	answer := make([]byte, 4096)
	for range requests {
		if _, err := c.Write([]byte("request\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, answer); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	rtrace.Stop()

	s, err := readTrace(&out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(s)
	// The client's goroutine parks on the network too, between its write
	// and the answer; its runs count as well, so there may be up to two a
	// request, and one more for the accept. A few server runs may have
	// found the next request already there and not parked.
	if s.runs < requests/2 || s.runs > 2*requests+1 {
		t.Errorf("%d request runs for %d requests", s.runs, requests)
	}
	if s.user <= 0 || s.syscalls <= 0 || s.runP50 < s.user || s.runP90 < s.runP50 {
		t.Errorf("implausible split: %s", s)
	}
}

// TestReadTraceStall holds the only P with a stretch of code that emits
// no trace event while another goroutine is runnable: the summary counts
// that as a stall. Hashing 64 MiB takes tens of milliseconds; the runtime
// preempts it every 10 ms or so, which splits it into stalls of about
// that length, each well over stallGap.
func TestReadTraceStall(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	data := make([]byte, 64<<20)
	var out bytes.Buffer
	if err := rtrace.Start(&out); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	go func() { close(ran) }() // runnable, and waits: the one P is busy below
	sum := sha256.Sum256(data)
	<-ran
	rtrace.Stop()
	if sum == [32]byte{} {
		t.Fatal("no hash")
	}

	s, err := readTrace(&out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(s)
	if s.stalls == 0 || s.longestStall <= stallGap || s.stalled < s.longestStall {
		t.Errorf("no stall found: %s", s)
	}
}
