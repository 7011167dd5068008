package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func header(values ...string) http.Header {
	h := http.Header{}
	for _, v := range values {
		h.Add("Authorization", v)
	}
	return h
}

func TestParseAuthorizationAccepts(t *testing.T) {
	key := fixedKey(5)
	tests := []struct {
		name  string
		value string
		want  string
	}{
		{"canonical", "Bearer " + key, key},
		{"lower-case scheme", "bearer " + key, key},
		{"upper-case scheme", "BEARER " + key, key},
		{"mixed-case scheme", "bEaReR " + key, key},
		// The token is returned untouched; the key format is checked later.
		{"upper-cased token kept as is", "Bearer " + strings.ToUpper(key), strings.ToUpper(key)},
		{"token68 punctuation", "Bearer a-b.c_d~e+f/g", "a-b.c_d~e+f/g"},
		{"token68 padding", "Bearer abc==", "abc=="},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAuthorization(header(tc.value))
			if err != nil {
				t.Fatalf("ParseAuthorization(%q): got error %v; want nil", tc.value, err)
			}
			if got != tc.want {
				t.Errorf("ParseAuthorization(%q) = %q; want %q", tc.value, got, tc.want)
			}
		})
	}
}

func TestParseAuthorizationRefuses(t *testing.T) {
	key := fixedKey(6)
	tests := []struct {
		name    string
		h       http.Header
		wantErr error
	}{
		{"no header", http.Header{}, ErrMissingKey},
		{"nil header", nil, ErrMissingKey},
		{"empty value", header(""), ErrMissingKey},
		{"only spaces", header("   "), ErrMissingKey},
		{"only tabs and spaces", header("\t \t"), ErrMissingKey},
		{"two lines", header("Bearer "+key, "Bearer "+key), ErrDuplicateHeader},
		{"two lines, one empty", header("Bearer "+key, ""), ErrDuplicateHeader},
		{"two empty lines", header("", ""), ErrDuplicateHeader},
		{"basic scheme", header("Basic dXNlcjpwYXNz"), ErrInvalidKey},
		{"bare token", header(key), ErrInvalidKey},
		{"bearer alone", header("Bearer"), ErrInvalidKey},
		{"bearer and a space", header("Bearer "), ErrInvalidKey},
		{"two spaces", header("Bearer  " + key), ErrInvalidKey},
		{"tab separator", header("Bearer\t" + key), ErrInvalidKey},
		{"leading space", header(" Bearer " + key), ErrInvalidKey},
		{"trailing space", header("Bearer " + key + " "), ErrInvalidKey},
		{"trailing tab", header("Bearer " + key + "\t"), ErrInvalidKey},
		{"comma list", header("Bearer " + key + ", Bearer " + key), ErrInvalidKey},
		{"trailing comma", header("Bearer " + key + ","), ErrInvalidKey},
		{"auth-param", header("Bearer realm=\"x\""), ErrInvalidKey},
		{"quoted token", header("Bearer \"" + key + "\""), ErrInvalidKey},
		{"token with space", header("Bearer " + key[:10] + " " + key[10:]), ErrInvalidKey},
		{"non-ASCII in token", header("Bearer " + key + "é"), ErrInvalidKey},
		{"control byte in token", header("Bearer " + key[:10] + "\x01" + key[10:]), ErrInvalidKey},
		{"NUL in token", header("Bearer " + key + "\x00"), ErrInvalidKey},
		{"CRLF in token", header("Bearer " + key + "\r\n"), ErrInvalidKey},
		{"only padding", header("Bearer =="), ErrInvalidKey},
		{"padding inside", header("Bearer ab=cd"), ErrInvalidKey},
		{"scheme prefix only", header("Bear " + key), ErrInvalidKey},
		{"scheme with suffix", header("Bearerx " + key), ErrInvalidKey},
		{"Token scheme", header("Token " + key), ErrInvalidKey},
		{"Kelvin sign after scheme", header("BEARER\u212a " + key), ErrInvalidKey},
		{"non-ASCII scheme lookalike", header("Веarer " + key), ErrInvalidKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAuthorization(tc.h)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ParseAuthorization: got error %v; want %v", err, tc.wantErr)
			}
			if got != "" {
				t.Errorf("ParseAuthorization: got token %q with an error; want \"\"", got)
			}
			if tc.wantErr == ErrInvalidKey {
				if r := ReasonOf(err); r != ReasonMalformed {
					t.Errorf("ReasonOf: got %q; want %q", r, ReasonMalformed)
				}
			}
			if strings.Contains(err.Error(), key[3:]) {
				t.Errorf("error %q contains the key", err)
			}
		})
	}
}

// TestParseAuthorizationFromWire checks the header as Go's server hands it
// to a handler: two header lines stay two values, and the scheme is found
// under its canonical name whatever case the client sent.
func TestParseAuthorizationFromWire(t *testing.T) {
	key := fixedKey(7)
	tests := []struct {
		name    string
		set     func(r *http.Request)
		want    string
		wantErr error
	}{
		{"lower-case header name", func(r *http.Request) {
			r.Header["authorization"] = []string{"Bearer " + key} // sent as written, not canonicalized
		}, key, nil},
		{"duplicate lines", func(r *http.Request) {
			r.Header.Add("Authorization", "Bearer "+key)
			r.Header.Add("Authorization", "Bearer "+key)
		}, "", ErrDuplicateHeader},
		{"none", func(*http.Request) {}, "", ErrMissingKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				tok string
				err error
			}
			got := make(chan result, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tok, err := ParseAuthorization(r.Header)
				got <- result{tok, err}
			}))
			defer srv.Close()
			req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			tc.set(req)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			res := <-got
			if !errors.Is(res.err, tc.wantErr) || (tc.wantErr == nil && res.err != nil) {
				t.Fatalf("ParseAuthorization: got error %v; want %v", res.err, tc.wantErr)
			}
			if res.tok != tc.want {
				t.Errorf("ParseAuthorization = %q; want %q", res.tok, tc.want)
			}
		})
	}
}
