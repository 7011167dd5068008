package demo

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseFault(t *testing.T) {
	for f := FaultNone; f <= FaultReset; f++ {
		got, err := ParseFault(f.String())
		if err != nil || got != f {
			t.Errorf("ParseFault(%q): got %v, %v; want %v", f.String(), got, err, f)
		}
	}
	for _, bad := range []string{"", "HANG", "timeout", "server_error"} {
		_, err := ParseFault(bad)
		if !errors.Is(err, ErrUnknownFault) {
			t.Errorf("ParseFault(%q): got %v; want ErrUnknownFault", bad, err)
		}
		// Regression: the error did not say which names are valid.
		if err != nil && !strings.Contains(err.Error(), "server-error, rate-limit") {
			t.Errorf("ParseFault(%q) error %q does not list the known faults", bad, err)
		}
	}
	if got := Fault(99).String(); got != "fault(99)" {
		t.Errorf("Fault(99).String(): got %q; want fault(99)", got)
	}
}

// startHTTP serves s on a loopback httptest server.
func startHTTP(t *testing.T, s *Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(s.Close) // runs first: releases hung handlers before ts.Close waits
	return ts
}

// fetch GETs url on a fresh connection and reads the whole body.
func fetch(ctx context.Context, url string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func TestFaultResponses(t *testing.T) {
	const target = "/api4/public/topic/bitcoin/time-series/v1"
	tests := []struct {
		fault  Fault
		status int
		check  func(t *testing.T, h http.Header, body []byte)
	}{
		{FaultServerError, 500, func(t *testing.T, h http.Header, body []byte) {
			if strings.TrimSpace(string(body)) != `{"error":"Internal server error"}` {
				t.Errorf("got body %q; want the JSON error", body)
			}
		}},
		{FaultRateLimit, 429, func(t *testing.T, h http.Header, body []byte) {
			if !strings.Contains(string(body), "Rate limit exceeded (minute)") {
				t.Errorf("got body %q; want the minute rate-limit error", body)
			}
			reset, _ := strconv.ParseInt(h.Get("X-Rate-Limit-Minute-Reset"), 10, 64)
			if h.Get("X-Rate-Limit-Minute-Remaining") != "0" || reset != testNow.Unix()-testNow.Unix()%60+60 {
				t.Errorf("got remaining %q reset %d; want 0 and the next minute", h.Get("X-Rate-Limit-Minute-Remaining"), reset)
			}
		}},
		{FaultGarbage, 200, func(t *testing.T, h http.Header, body []byte) {
			if len(body) == 0 || json.Valid(body) {
				t.Errorf("got %q; want non-empty non-JSON bytes", body)
			}
		}},
		{FaultWrongShape, 200, func(t *testing.T, h http.Header, body []byte) {
			var v struct {
				Data []json.RawMessage `json:"data"`
			}
			if !json.Valid(body) || json.Unmarshal(body, &v) == nil {
				t.Errorf("got %q; want valid JSON whose data is not an array", body)
			}
		}},
		{FaultOversize, 200, func(t *testing.T, h http.Header, body []byte) {
			if len(body) <= 9<<20 {
				t.Errorf("got %d bytes; want more than 9 MiB", len(body))
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.fault.String(), func(t *testing.T) {
			s, _ := newServer(t, Options{})
			ts := startHTTP(t, s)
			s.SetFault(tc.fault)
			resp, body, err := fetch(context.Background(), ts.URL+target)
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("got status %d; want %d", resp.StatusCode, tc.status)
			}
			tc.check(t, resp.Header, body)
			s.SetFault(FaultNone)
			if resp, _, err := fetch(context.Background(), ts.URL+target); err != nil || resp.StatusCode != 200 {
				t.Errorf("after FaultNone: got %v, %v; want 200", resp, err)
			}
		})
	}
}

func TestFaultFlap(t *testing.T) {
	s, _ := newServer(t, Options{})
	s.SetFault(FaultFlap)
	want := []int{500, 200, 500, 200, 500, 200}
	for i, code := range want {
		if w := do(s, http.MethodGet, "/api4/public/topics/list/v1"); w.Code != code {
			t.Errorf("request %d: got %d; want %d", i, w.Code, code)
		}
	}
	s.SetFault(FaultFlap) // restarts the alternation
	if w := do(s, http.MethodGet, "/api4/public/topics/list/v1"); w.Code != 500 {
		t.Errorf("after SetFault: got %d; want 500", w.Code)
	}
}

func TestFaultsUseNoQuota(t *testing.T) {
	s, _ := newServer(t, Options{PerMinute: 1})
	s.SetFault(FaultServerError)
	for i := 0; i < 3; i++ {
		do(s, http.MethodGet, "/api4/public/topics/list/v1")
	}
	s.SetFault(FaultNone)
	if w := do(s, http.MethodGet, "/api4/public/topics/list/v1"); w.Code != 200 {
		t.Errorf("after faults: got %d; want 200 (faults must not spend the limit)", w.Code)
	}
	if w := do(s, http.MethodGet, "/api4/public/topics/list/v1"); w.Code != 429 {
		t.Errorf("second real request: got %d; want 429", w.Code)
	}
}

func TestFaultReset(t *testing.T) {
	s, _ := newServer(t, Options{})
	ts := startHTTP(t, s)
	s.SetFault(FaultReset)
	resp, _, err := fetch(context.Background(), ts.URL+"/api4/public/topics/list/v1")
	if err == nil {
		t.Fatalf("got status %d; want a connection error", resp.StatusCode)
	}
	if s.Count() < 1 {
		t.Errorf("Count %d; want the request counted", s.Count())
	}
	// A writer that cannot be hijacked is aborted instead.
	defer func() {
		if r := recover(); r != http.ErrAbortHandler {
			t.Errorf("recorder: got panic %v; want http.ErrAbortHandler", r)
		}
	}()
	do(s, http.MethodGet, "/api4/public/topics/list/v1")
}

// waitCount spins (without sleeping) until s has received n requests.
func waitCount(t *testing.T, s *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("Count stuck at %d; want %d", s.Count(), n)
		}
		runtime.Gosched()
	}
}

func TestFaultHangReleasedByClose(t *testing.T) {
	s, _ := newServer(t, Options{})
	ts := startHTTP(t, s)
	s.SetFault(FaultHang)
	type result struct {
		status int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, _, err := fetch(context.Background(), ts.URL+"/api4/public/topics/list/v1")
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{status: resp.StatusCode}
	}()
	waitCount(t, s, 1)
	select {
	case r := <-done:
		t.Fatalf("hung request answered before Close: %+v", r)
	default:
	}
	s.Close()
	s.Close() // idempotent
	if r := <-done; r.err != nil || r.status != http.StatusServiceUnavailable {
		t.Errorf("after Close: got %+v; want 503", r)
	}
}

func TestFaultHangReleasedByContext(t *testing.T) {
	s, _ := newServer(t, Options{})
	ts := startHTTP(t, s)
	s.SetFault(FaultHang)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := fetch(ctx, ts.URL+"/api4/public/topics/list/v1")
		done <- err
	}()
	waitCount(t, s, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("got %v; want context.Canceled", err)
	}
	// The handler itself returns once its context is done.
	rctx, rcancel := context.WithCancel(context.Background())
	rcancel()
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api4/public/topics/list/v1", nil).WithContext(rctx))
	if w.Body.Len() != 0 {
		t.Errorf("cancelled hang wrote %q; want nothing", w.Body)
	}
}
