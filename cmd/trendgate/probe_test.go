package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
)

// TestHealthcheckReadyFlipsDuringDrain: with admin.token set, a probe that
// sends no token ("trendgate healthcheck -ready") sees readiness 200 while
// the gateway serves and 503 "shutting down" once the drain begins, while
// liveness stays 200. The probe used to get 401 invalid_admin_token.
func TestHealthcheckReadyFlipsDuringDrain(t *testing.T) {
	up, err := demo.New(demo.Options{APIKey: "upstream-test-credential"})
	if err != nil {
		t.Fatal(err)
	}
	// Holds every upstream request until release is closed, so the drain
	// has a request to wait for.
	held, release := make(chan struct{}, 1), make(chan struct{})
	upSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		up.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { up.Close(); upSrv.Close() })

	key, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Upstream.BaseURL = upSrv.URL
	cfg.Upstream.APIKey = "upstream-test-credential"
	cfg.Admin.Token = "admin-test-token"
	cfg.Keys = []config.Key{{ID: "team", SHA256: auth.Digest(key), Plan: "full"}}
	g, err := gateway.New(cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminURL := "http://" + adm.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, gateway.Listeners{Public: pub, Admin: adm}) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return within 30s")
		}
	}
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		stop()
	})

	probe := func(args ...string) error {
		var out bytes.Buffer
		return run(append([]string{"healthcheck"}, args...), nil, &out, &out)
	}
	if err := probe("-ready", "-url", adminURL); err != nil {
		t.Fatalf("healthcheck -ready while serving: %v; want success", err)
	}

	// One request in flight at the upstream, then the drain begins.
	client := &http.Client{Timeout: 30 * time.Second}
	reqDone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+pub.Addr().String()+"/api4/public/topics/list/v1", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		reqDone <- err
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the upstream")
	}
	cancel()

	tests := []struct {
		name    string
		args    []string
		wantErr string // "" means success
	}{
		{"readiness, base URL", []string{"-ready", "-url", adminURL}, "503 Service Unavailable: shutting down"},
		{"readiness, healthz URL turned readyz", []string{"-ready", "-url", adminURL + "/healthz"}, "shutting down"},
		{"liveness", []string{"-url", adminURL}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The drain begins asynchronously: poll until readiness flips.
			var err error
			deadline := time.Now().Add(10 * time.Second)
			for {
				err = probe(tc.args...)
				if tc.wantErr == "" || err != nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond) // polling for the drain to begin, not waiting for time to pass
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("healthcheck %v during the drain: %v; want success", tc.args, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("healthcheck %v during the drain: %v; want an error with %q", tc.args, err, tc.wantErr)
			}
		})
	}
	close(release)
	if err := <-reqDone; err != nil {
		t.Errorf("the in-flight request: %v; want its answer", err)
	}
	stop()
}

// TestProbeURL: -url takes the admin base or a whole probe URL.
func TestProbeURL(t *testing.T) {
	tests := []struct {
		base    string
		ready   bool
		want    string
		wantErr bool
	}{
		{"http://127.0.0.1:9090", false, "http://127.0.0.1:9090/healthz", false},
		{"http://127.0.0.1:9090/", true, "http://127.0.0.1:9090/readyz", false},
		{"http://127.0.0.1:9090/healthz", true, "http://127.0.0.1:9090/readyz", false},
		{"http://127.0.0.1:9090/healthz", false, "http://127.0.0.1:9090/healthz", false},
		{"http://127.0.0.1:9090/custom", true, "http://127.0.0.1:9090/custom", false},
		{"127.0.0.1:9090", true, "http://127.0.0.1:9090/readyz", false},
		{"ftp://127.0.0.1:9090", false, "", true},
		{"http://", false, "", true},
	}
	for _, tc := range tests {
		got, err := probeURL(tc.base, tc.ready)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("probeURL(%q, %v) = %q, %v; want %q (error %v)", tc.base, tc.ready, got, err, tc.want, tc.wantErr)
		}
	}
}
