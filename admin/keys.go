package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"trendgate/internal/httperr"
)

// UsageSource reports per-key usage for GET /keys and GET /keys/{id};
// gateway.Gateway implements it. KeyUsage returns ErrUnknownKey for an id no
// configured key has.
type UsageSource interface {
	KeysUsage(ctx context.Context) ([]KeyUsage, error)
	KeyUsage(ctx context.Context, id string) (KeyUsage, error)
}

// ErrUnknownKey is returned by UsageSource.KeyUsage for an id that names no
// configured key; the route answers 404 unknown_key.
var ErrUnknownKey = errors.New("admin: unknown key id")

// KeyList is the body of GET /keys.
type KeyList struct {
	GeneratedAt time.Time  `json:"generated_at"`
	Keys        []KeyUsage `json:"keys"`
}

// KeyUsage is one configured key's standing, the body of GET /keys/{id}.
// It never holds the key's secret or digest.
type KeyUsage struct {
	ID   string `json:"id"`
	Plan string `json:"plan"`
	// State is active, disabled or expired.
	State   string     `json:"state"`
	Expires *time.Time `json:"expires,omitempty"`
	// Rate is the token bucket; nil (null) when the key has no rate limit.
	Rate *RateUsage `json:"rate"`
	// Daily and Monthly are the quotas in cost units over UTC calendar
	// windows.
	Daily   QuotaUsage `json:"daily"`
	Monthly QuotaUsage `json:"monthly"`
	// Source says where Rate, Daily and Monthly come from: "local" (this
	// instance), "redis" (shared by every instance: the same whichever
	// answers) or "local-fallback" (Redis unavailable: this instance's
	// fallback share, whose limits are that share).
	Source string `json:"source"`
	// Last24h counts requests and charged units over the last 24 hours.
	Last24h UsageWindow `json:"last_24h"`
	// LastSeen is the time of the key's latest request seen by this
	// instance; nil (null) if none since it started.
	LastSeen *time.Time `json:"last_seen"`
}

// RateUsage is a key's token bucket: its refill rate, its size and the
// whole tokens in it now.
type RateUsage struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
	Tokens    int     `json:"tokens"`
}

// QuotaUsage is one quota window. Used counts units charged in the current
// window. Limit 0 means unlimited; Remaining is then nil (null) and Used
// stays 0 (the limiter does not count a window it does not limit).
type QuotaUsage struct {
	Used      int64     `json:"used"`
	Limit     int64     `json:"limit"`
	Remaining *int64    `json:"remaining"`
	ResetsAt  time.Time `json:"resets_at"`
}

// UsageWindow is a key's traffic over the 24 hours ending with the current
// hour. Scope is "instance": each instance counts the requests it answered
// (in cluster mode, add up the instances for the key's total).
type UsageWindow struct {
	Scope    string    `json:"scope"`
	Since    time.Time `json:"since"`
	Requests uint64    `json:"requests"`
	Units    uint64    `json:"units"`
	// UpstreamCalls is how many upstream requests the key's cold misses
	// caused (its fair share of the upstream budget is spent on these).
	UpstreamCalls uint64 `json:"upstream_calls"`
	// UpstreamAbandoned is the part of UpstreamCalls made for requests
	// whose client had gone (499, quota refunded) before the answer came.
	UpstreamAbandoned uint64       `json:"upstream_calls_abandoned"`
	ByEndpoint        []UsageCount `json:"by_endpoint"`
}

// UsageCount is the requests and charged units of one endpoint and status
// class (2xx, 3xx, 4xx, 429, 5xx). Units are charged only for delivered
// answers (2xx and 304).
type UsageCount struct {
	Endpoint string `json:"endpoint"`
	Status   string `json:"status"`
	Requests uint64 `json:"requests"`
	Units    uint64 `json:"units"`
}

var errUnknownKey = httperr.New(http.StatusNotFound, "unknown_key", "no configured key has this id")

var errInternal = httperr.New(http.StatusInternalServerError, "internal_error", "internal error")

// registerKeys adds GET /keys and GET /keys/{id}, behind the admin token.
func (s *server) registerKeys(mux *http.ServeMux) {
	mux.Handle("GET /keys", s.auth(http.HandlerFunc(s.serveKeys)))
	mux.Handle("GET /keys/{id}", s.auth(http.HandlerFunc(s.serveKey)))
}

func (s *server) serveKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := s.o.Usage.KeysUsage(r.Context())
	if err != nil {
		httperr.Write(w, requestID(w), errInternal)
		return
	}
	if keys == nil {
		keys = []KeyUsage{}
	}
	writeJSON(w, http.StatusOK, KeyList{GeneratedAt: s.now(), Keys: keys})
}

func (s *server) serveKey(w http.ResponseWriter, r *http.Request) {
	k, err := s.o.Usage.KeyUsage(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, ErrUnknownKey):
		httperr.Write(w, requestID(w), errUnknownKey)
		return
	case err != nil:
		httperr.Write(w, requestID(w), errInternal)
		return
	}
	writeJSON(w, http.StatusOK, k)
}
