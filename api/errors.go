package api

import (
	"net/http"

	"trendgate/internal/httperr"
)

// Client-facing errors raised by the gateway after parsing (ParseRequest
// returns its own). They are shared values: callers copy one before setting
// RetryAfter, and nobody may modify them. None echoes client input.
var (
	ErrMissingKey = httperr.New(http.StatusUnauthorized, "missing_api_key",
		"an API key is required: send it as 'Authorization: Bearer <key>'")
	ErrInvalidKey = httperr.New(http.StatusUnauthorized, "invalid_api_key",
		"the API key is not valid")
	// ErrInvalidKeyNoBearer is ErrInvalidKey for an Authorization header
	// without the Bearer scheme (the key sent alone, say): the same code,
	// with a fixed hint. It depends only on the header's shape, never on the
	// keyring, and never repeats the header.
	ErrInvalidKeyNoBearer = httperr.New(http.StatusUnauthorized, "invalid_api_key",
		"the API key is not valid: the Authorization header must be 'Bearer ' followed by the key")
	ErrDuplicateAuth = httperr.New(http.StatusBadRequest, "duplicate_authorization",
		"send exactly one Authorization header")
	ErrAuthBlocked = httperr.New(http.StatusTooManyRequests, "too_many_auth_failures",
		"too many failed authentication attempts from this address; retry later")
	ErrNotInPlan = httperr.New(http.StatusForbidden, "endpoint_not_in_plan",
		"your plan does not include this endpoint")
	ErrMetricNotInPlan = httperr.New(http.StatusForbidden, "metric_not_in_plan",
		"your plan does not include this metric")
	// ErrRouteNotLimited refuses a key of a limited-data plan on a
	// configured route without a limited-data allowlist (fail closed).
	ErrRouteNotLimited = httperr.New(http.StatusForbidden, "limited_data_unavailable",
		"your plan serves limited data, and this endpoint has no limited form")
	ErrUnknownTopic = httperr.New(http.StatusNotFound, "unknown_topic",
		"the upstream has no data for this topic")
	ErrInternal = httperr.New(http.StatusInternalServerError, "internal_error",
		"internal error; the request id identifies it in the gateway's logs")
	ErrBadUpstream = httperr.New(http.StatusBadGateway, "bad_upstream_response",
		"the upstream answered with something the gateway cannot serve")
	ErrUpstreamDown = httperr.New(http.StatusBadGateway, "upstream_unavailable",
		"the upstream could not be reached")
	ErrUpstreamTimeout = httperr.New(http.StatusGatewayTimeout, "upstream_timeout",
		"the upstream did not answer in time")
	ErrUpstreamBreaker = httperr.New(http.StatusServiceUnavailable, "upstream_unavailable",
		"the upstream is failing; requests to it are paused")
	ErrUpstreamBudget = httperr.New(http.StatusServiceUnavailable, "upstream_budget_exhausted",
		"the upstream request budget is used up and nothing cached can answer")
	ErrUpstreamShare = httperr.New(http.StatusTooManyRequests, "upstream_share_exhausted",
		"this key's account has used its fair share of the upstream budget while other accounts are waiting for it, and nothing cached can answer; retry after the Retry-After delay")
	ErrUpstreamCap = httperr.New(http.StatusTooManyRequests, "upstream_cap_reached",
		"this key's account has made the upstream calls its plan allows per minute (upstream_per_minute), and nothing cached can answer; retry after the Retry-After delay")
	ErrUpstreamLimited = httperr.New(http.StatusServiceUnavailable, "upstream_rate_limited",
		"the upstream is rate limiting the gateway and nothing cached can answer")
	ErrHTTPSRequired = httperr.New(http.StatusForbidden, "https_required",
		"this API is served over HTTPS only; send the request to https:// (a key sent over plain HTTP should be treated as exposed)")
	ErrClientGone = httperr.New(499, "client_closed_request", "the client went away")
)

// CodeCostExceedsLimit is the code of the 403 for a request whose cost is
// above the key's burst, daily or monthly limit, which no wait can fix.
const CodeCostExceedsLimit = "cost_exceeds_limit"
