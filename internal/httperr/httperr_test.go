package httperr

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name     string
		err      *Error
		wantBody string
		wantRA   string
	}{
		{
			name:     "angle brackets and ampersands stay as written",
			err:      New(http.StatusBadRequest, "unknown_parameter", `unknown parameter "key"; send the key as Authorization: Bearer <key> & drop ?key=`),
			wantBody: `{"error":"unknown parameter \"key\"; send the key as Authorization: Bearer <key> & drop ?key=","code":"unknown_parameter","request_id":"r-1"}` + "\n",
		},
		{
			name:     "retry after rounds up",
			err:      &Error{Status: http.StatusTooManyRequests, Code: "rate_limited", Message: "slow down", RetryAfter: 1500 * time.Millisecond},
			wantBody: `{"error":"slow down","code":"rate_limited","request_id":"r-1"}` + "\n",
			wantRA:   "2",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Write(rec, "r-1", tc.err)
			if got := rec.Body.String(); got != tc.wantBody {
				t.Errorf("body: got %s; want %s", got, tc.wantBody)
			}
			if got := rec.Code; got != tc.err.Status {
				t.Errorf("status: got %d; want %d", got, tc.err.Status)
			}
			if got, want := rec.Header().Get("Content-Length"), strconv.Itoa(len(tc.wantBody)); got != want {
				t.Errorf("Content-Length: got %s; want %s", got, want)
			}
			if got := rec.Header().Get("Retry-After"); got != tc.wantRA {
				t.Errorf("Retry-After: got %q; want %q", got, tc.wantRA)
			}
		})
	}
}
