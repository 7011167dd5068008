package api

import (
	"net/http"
	"time"
)

// UsagePath is the route of the client's own usage report (Usage): its
// account's quotas, its key's rate policy and their last 24 hours. It costs
// one token of the key's bucket and no quota, and never calls the upstream.
const UsagePath = "/trendgate/v1/usage"

// CheckUsageRequest validates a request for UsagePath as ParseRequest
// validates the API's: GET or HEAD (else ErrMethodNotAllowed), no body
// (body_not_allowed), a clean request-target (invalid_path) and no query
// parameters (key_in_query for a key, else unknown_parameter). The error
// is always an *httperr.Error.
func CheckUsageRequest(r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return ErrMethodNotAllowed
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return errBody
	}
	if !validTarget(r.RequestURI) {
		return errTarget
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	p, ok := scanQuery(r.URL.RawQuery)
	switch {
	case !ok:
		return errQuery
	case p.key:
		return errKeyInQuery
	}
	return errNoParams
}

// Usage is the body of GET UsagePath: the standing of the key the request
// was made with, never its secret.
type Usage struct {
	GeneratedAt time.Time `json:"generated_at"`
	// Key is the key's id; Account its account (the key's own id for a key
	// configured without one); Plan the account's plan.
	Key     string `json:"key"`
	Account string `json:"account"`
	Plan    string `json:"plan"`
	// Rate is the key's own token bucket; nil (null) without a rate limit.
	Rate *UsageRate `json:"rate"`
	// Daily and Monthly are the account's quotas, shared by all its keys.
	Daily   UsageQuota `json:"daily"`
	Monthly UsageQuota `json:"monthly"`
	// Last24h is the traffic of the last 24 hours, of the key and of its
	// account (all its keys).
	Last24h UsageTraffic `json:"last_24h"`
	// History is the account's daily usage (all its keys) over the last
	// UsageHistoryDays UTC days, today included, oldest first; a day
	// without usage is absent. Absent when the gateway keeps no usage
	// history or the account has none in those days.
	History []UsageDay `json:"history,omitempty"`
}

// UsageHistoryDays is how many days Usage.History covers.
const UsageHistoryDays = 90

// UsageDay is one UTC day of an account's usage history: the quota units
// charged (the same as its daily quota counter charged), the requests
// answered, the upstream calls they caused and the body bytes sent.
type UsageDay struct {
	Date          string `json:"date"` // YYYY-MM-DD
	Units         int64  `json:"units"`
	Requests      int64  `json:"requests"`
	UpstreamCalls int64  `json:"upstream_calls"`
	BytesSent     int64  `json:"bytes_sent"`
}

// UsageRate is a key's token bucket: refill rate, size and the whole
// tokens left after this request took its one.
type UsageRate struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
	Remaining int     `json:"remaining"`
}

// UsageQuota is one quota window in cost units. Limit 0 means unlimited:
// Remaining is then nil (null) and Used 0 (an unlimited window is not
// counted). ResetsAt is the end of the UTC day or month.
type UsageQuota struct {
	Limit     int64     `json:"limit"`
	Used      int64     `json:"used"`
	Remaining *int64    `json:"remaining"`
	ResetsAt  time.Time `json:"resets_at"`
}

// UsageTraffic counts requests over the 24 hours ending with the current
// hour, since Since. Scope is "instance": each gateway instance counts the
// requests it answered, so in cluster mode one instance's figures are its
// share (the quotas, by contrast, are cluster-wide).
type UsageTraffic struct {
	Scope   string      `json:"scope"`
	Since   time.Time   `json:"since"`
	Key     UsageCounts `json:"key"`
	Account UsageCounts `json:"account"`
}

// UsageCounts are requests answered (usage reads excluded), quota units
// charged for them, and the upstream calls their cache misses made.
type UsageCounts struct {
	Requests      uint64 `json:"requests"`
	Units         uint64 `json:"units"`
	UpstreamCalls uint64 `json:"upstream_calls"`
}
