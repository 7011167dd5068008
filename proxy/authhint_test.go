package proxy_test

import (
	"strings"
	"testing"

	"trendgate/api"
	"trendgate/gateway/gatewaytest"
)

// TestAuthBearerHint: an Authorization header without the Bearer scheme
// (the key alone, another scheme) gets invalid_api_key with a fixed hint
// about the scheme, never the header's content; a header with the scheme
// and a bad key gets the plain, uniform invalid_api_key.
func TestAuthBearerHint(t *testing.T) {
	h := gatewaytest.New(t, nil)
	const target = "/api4/public/topics/list/v1"
	tests := []struct {
		name, header string
		wantMsg      string
	}{
		{"key alone", h.Full, api.ErrInvalidKeyNoBearer.Message},
		{"basic scheme", "Basic " + h.Full, api.ErrInvalidKeyNoBearer.Message},
		{"token scheme", "Token " + h.Full, api.ErrInvalidKeyNoBearer.Message},
		{"bearer, two spaces", "Bearer  " + h.Full, api.ErrInvalidKey.Message},
		{"bearer alone", "Bearer", api.ErrInvalidKey.Message},
		{"bearer, unknown key", "Bearer " + gatewaytest.NewKey(t), api.ErrInvalidKey.Message},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := h.Do("GET", target, "", "Authorization", tc.header)
			e := gatewaytest.DecodeError(t, body)
			if resp.StatusCode != 401 || e.Code != "invalid_api_key" {
				t.Fatalf("got %d %s; want 401 invalid_api_key", resp.StatusCode, body)
			}
			if e.Error != tc.wantMsg {
				t.Errorf("message: got %q; want %q", e.Error, tc.wantMsg)
			}
			if strings.Contains(string(body), h.Full[3:20]) || strings.Contains(string(body), "Basic") || strings.Contains(string(body), "Token") {
				t.Errorf("the body repeats the header: %s", body)
			}
			if !strings.Contains(string(body), "'Bearer '") && tc.wantMsg == api.ErrInvalidKeyNoBearer.Message {
				t.Errorf("the hint is HTML-escaped or missing: %s", body)
			}
		})
	}
	// Error bodies are not HTML-escaped: the missing-key hint reads <key>.
	if _, body := h.Do("GET", target, ""); !strings.Contains(string(body), "Bearer <key>") {
		t.Errorf("missing key body %s; want the hint's <key> as written, not \\u003ckey\\u003e", body)
	}
	if n := h.Up.Count(); n != 0 {
		t.Errorf("upstream requests: got %d; want 0", n)
	}
}
