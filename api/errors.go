package api

import (
	"net/http"

	"trendgate/internal/httperr"
)

// The codes of every error the gateway answers a client with, in the
// "code" member of the JSON error body: all of them, here and nowhere
// else (TestCodesLiveHere holds the rest of the module to that). A code
// names one condition with one status; api/openapi.yaml documents each.
const (
	CodeBadUpstreamResponse     = "bad_upstream_response"
	CodeBodyNotAllowed          = "body_not_allowed"
	CodeClientClosedRequest     = "client_closed_request"
	CodeCostExceedsLimit        = "cost_exceeds_limit"
	CodeDailyQuotaExceeded      = "daily_quota_exceeded"
	CodeDuplicateAuthorization  = "duplicate_authorization"
	CodeDuplicateParameter      = "duplicate_parameter"
	CodeEndpointNotInPlan       = "endpoint_not_in_plan"
	CodeHTTPSRequired           = "https_required"
	CodeInternalError           = "internal_error"
	CodeInvalidAPIKey           = "invalid_api_key"
	CodeInvalidBucket           = "invalid_bucket"
	CodeInvalidEnd              = "invalid_end"
	CodeInvalidInterval         = "invalid_interval"
	CodeInvalidMetric           = "invalid_metric"
	CodeInvalidParameter        = "invalid_parameter"
	CodeInvalidPath             = "invalid_path"
	CodeInvalidQuery            = "invalid_query"
	CodeInvalidStart            = "invalid_start"
	CodeInvalidTopic            = "invalid_topic"
	CodeInvalidWindow           = "invalid_window"
	CodeKeyInQuery              = "key_in_query"
	CodeLimitedDataUnavailable  = "limited_data_unavailable"
	CodeMethodNotAllowed        = "method_not_allowed"
	CodeMetricNotInPlan         = "metric_not_in_plan"
	CodeMissingAPIKey           = "missing_api_key"
	CodeMonthlyQuotaExceeded    = "monthly_quota_exceeded"
	CodeNotFound                = "not_found"
	CodeRateLimited             = "rate_limited"
	CodeTooManyAuthFailures     = "too_many_auth_failures"
	CodeUnknownParameter        = "unknown_parameter"
	CodeUnknownTopic            = "unknown_topic"
	CodeUpstreamBudgetExhausted = "upstream_budget_exhausted"
	CodeUpstreamBusy            = "upstream_busy"
	CodeUpstreamCapReached      = "upstream_cap_reached"
	CodeUpstreamPaused          = "upstream_paused"
	CodeUpstreamRateLimited     = "upstream_rate_limited"
	CodeUpstreamRejected        = "upstream_rejected"
	CodeUpstreamShareExhausted  = "upstream_share_exhausted"
	CodeUpstreamTimeout         = "upstream_timeout"
	CodeUpstreamUnavailable     = "upstream_unavailable"
)

// The codes of the admin listener's own errors (the operator's API).
const (
	CodeAdminNotLocal     = "admin_not_local"
	CodeInvalidAdminToken = "invalid_admin_token"
	CodeInvalidCursor     = "invalid_cursor"
	CodeMissingScope      = "missing_scope"
	CodeInvalidBody       = "invalid_body"
	CodeInvalidKeyChange  = "invalid_key_change"
	CodeInvalidPurge      = "invalid_purge"
	CodeKeyAPIReadOnly    = "key_api_read_only"
	CodeKeyIDTaken        = "key_id_taken"
	CodeKeyIDRevoked      = "key_id_revoked"
	CodeAccountInUse      = "account_in_use"
	CodeKeyNotActive      = "key_not_active"
	CodeKeysUnavailable   = "keys_store_unavailable"
	CodeNotCached         = "not_cached"
	CodeUnknownAccount    = "unknown_account"
	CodeUnknownKey        = "unknown_key"
	// The usage history's (admin/usage.go).
	CodeInvalidDate          = "invalid_date"
	CodeInvalidRange         = "invalid_range"
	CodeRangeBeyondRetention = "range_beyond_retention"
)

// Client-facing errors raised by the gateway after parsing (ParseRequest
// returns its own). They are shared values: callers copy one before setting
// RetryAfter, and nobody may modify them. None echoes client input.
var (
	ErrMissingKey = httperr.New(http.StatusUnauthorized, CodeMissingAPIKey,
		"an API key is required: send it as 'Authorization: Bearer <key>'")
	ErrInvalidKey = httperr.New(http.StatusUnauthorized, CodeInvalidAPIKey,
		"the API key is not valid")
	// ErrInvalidKeyNoBearer is ErrInvalidKey for an Authorization header
	// without the Bearer scheme (the key sent alone, say): the same code,
	// with a fixed hint. It depends only on the header's shape, never on the
	// keyring, and never repeats the header.
	ErrInvalidKeyNoBearer = httperr.New(http.StatusUnauthorized, CodeInvalidAPIKey,
		"the API key is not valid: the Authorization header must be 'Bearer ' followed by the key")
	ErrDuplicateAuth = httperr.New(http.StatusBadRequest, CodeDuplicateAuthorization,
		"send exactly one Authorization header")
	ErrAuthBlocked = httperr.New(http.StatusTooManyRequests, CodeTooManyAuthFailures,
		"too many failed authentication attempts from this address; retry later")
	ErrNotInPlan = httperr.New(http.StatusForbidden, CodeEndpointNotInPlan,
		"your plan does not include this endpoint")
	ErrMetricNotInPlan = httperr.New(http.StatusForbidden, CodeMetricNotInPlan,
		"your plan does not include this metric")
	// ErrRouteNotLimited refuses a key of a limited-data plan on a
	// configured route without a limited-data allowlist (fail closed).
	ErrRouteNotLimited = httperr.New(http.StatusForbidden, CodeLimitedDataUnavailable,
		"your plan serves limited data, and this endpoint has no limited form")
	ErrUnknownTopic = httperr.New(http.StatusNotFound, CodeUnknownTopic,
		"the upstream has no data for this topic")
	ErrInternal = httperr.New(http.StatusInternalServerError, CodeInternalError,
		"internal error; the request id identifies it in the gateway's logs")
	ErrBadUpstream = httperr.New(http.StatusBadGateway, CodeBadUpstreamResponse,
		"the upstream answered with something the gateway cannot serve")
	ErrUpstreamDown = httperr.New(http.StatusBadGateway, CodeUpstreamUnavailable,
		"the upstream could not be reached")
	ErrUpstreamTimeout = httperr.New(http.StatusGatewayTimeout, CodeUpstreamTimeout,
		"the upstream did not answer in time")
	ErrUpstreamBreaker = httperr.New(http.StatusServiceUnavailable, CodeUpstreamPaused,
		"the upstream is failing; requests to it are paused")
	ErrUpstreamBusy = httperr.New(http.StatusServiceUnavailable, CodeUpstreamBusy,
		"every upstream connection this key's account may use is busy and nothing cached can answer; retry after the Retry-After delay")
	ErrUpstreamBudget = httperr.New(http.StatusServiceUnavailable, CodeUpstreamBudgetExhausted,
		"the upstream request budget is used up and nothing cached can answer")
	ErrUpstreamShare = httperr.New(http.StatusTooManyRequests, CodeUpstreamShareExhausted,
		"this key's account has used its fair share of the upstream budget while other accounts are waiting for it, and nothing cached can answer; retry after the Retry-After delay")
	ErrUpstreamCap = httperr.New(http.StatusTooManyRequests, CodeUpstreamCapReached,
		"this key's account has made the upstream calls its plan allows per minute (upstream_per_minute), and nothing cached can answer; retry after the Retry-After delay")
	// ErrUpstreamRejected is the upstream's own 400 for the request: a
	// refusal of the request itself, which the gateway keeps for a while
	// instead of asking again.
	ErrUpstreamRejected = httperr.New(http.StatusBadRequest, CodeUpstreamRejected,
		"the upstream refuses this request as invalid (for example a window it does not serve); change the request rather than retry it")
	// ErrStartInFuture is the 400 for a window given only a start that is
	// not before the upstream's now: the upstream ends such a window at its
	// now and refuses it.
	ErrStartInFuture = httperr.New(http.StatusBadRequest, CodeInvalidStart,
		"start is in the future by the upstream's clock; without end the window ends at the upstream's now, so start must be before it")
	ErrUpstreamLimited = httperr.New(http.StatusServiceUnavailable, CodeUpstreamRateLimited,
		"the upstream is rate limiting the gateway and nothing cached can answer")
	ErrHTTPSRequired = httperr.New(http.StatusForbidden, CodeHTTPSRequired,
		"this API is served over HTTPS only; send the request to https:// (a key sent over plain HTTP should be treated as exposed)")
	ErrClientGone = httperr.New(499, CodeClientClosedRequest, "the client went away")
)

// ErrNotFound is what ParseRequest returns for a path that is not one of the
// API's routes: 404, code "not_found". It is returned itself, never wrapped
// or copied, so callers can use errors.Is (for example to answer 401 instead
// under /api4/ when no key was presented). Callers must not modify it.
var ErrNotFound = httperr.New(http.StatusNotFound, CodeNotFound,
	"no such route; the API serves /api4/public/topics/list/v1, /api4/public/topic/<topic>/whatsup/v1, "+
		"/api4/public/topic/<topic>/time-series/v1, /topic/<topic>/time-series/<metric>.tsv and the routes its operator configured")

// ErrMethodNotAllowed is what ParseRequest returns for any method other than
// GET and HEAD: 405, code "method_not_allowed". The caller adds the header
// Allow: AllowedMethods. Like ErrNotFound it is returned itself and must not
// be modified.
var ErrMethodNotAllowed = httperr.New(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
	"method not allowed; the API accepts GET and HEAD")

// The fixed 400s. They are shared values: ParseRequest returns them as is,
// and nobody may modify them. None of them echoes client input, so none can
// echo an API key.
var (
	errBody = bad(CodeBodyNotAllowed,
		"requests must not have a body; the API accepts GET and HEAD without a body")
	errTarget = bad(CodeInvalidPath,
		"the request-target contains a raw '#', space or control character; percent-encode # as %23 and space as %20")
	errTopicEscape = bad(CodeInvalidTopic,
		"the topic contains an invalid percent-escape; a topic is percent-encoded once (# as %23, $ as %24, space as %20 or +)")
	errTopicLong = bad(CodeInvalidTopic,
		"the topic is longer than 64 bytes")
	errTopicChars = bad(CodeInvalidTopic,
		"the topic may contain only letters, digits, spaces, # and $ (no leading, trailing or double spaces; no encoded /, + or %)")
	errMetric = bad(CodeInvalidMetric,
		"unknown TSV metric; accepted: interactions, posts_active, contributors_active, sentiment")
	errQuery = bad(CodeInvalidQuery,
		"the query string is malformed; separate parameters with & (not ;) and percent-encode them validly")
	errKeyInQuery = bad(CodeKeyInQuery,
		"API keys are not accepted in the query string; send the header Authorization: Bearer <key>")
	errNoParams = bad(CodeUnknownParameter,
		"this endpoint accepts no query parameters")
	errBucket = bad(CodeInvalidBucket,
		"bucket must be hour or day (aliases: hours, days); the default is hour")
	errInterval = bad(CodeInvalidInterval,
		"interval must be one of 1d, 1w, 1m, 3m, 6m, 1y, all; the default is 1w")
	errStart = bad(CodeInvalidStart,
		"start must be unix seconds written as a plain decimal number from 1 to 9999999999: no sign, leading zeros, decimals or exponent")
	errEnd = bad(CodeInvalidEnd,
		"end must be unix seconds written as a plain decimal number from 1 to 9999999999: no sign, leading zeros, decimals or exponent")
	errEndEarly = bad(CodeInvalidEnd,
		"end is too early: without start the window begins 7 days before end, which must be after unix time 0")
	errWindow = bad(CodeInvalidWindow,
		"start must be before end")
)

func bad(code, message string) *httperr.Error {
	return httperr.New(http.StatusBadRequest, code, message)
}

// emptyParam returns the 400 for a series parameter given without a value:
// the parameter's own invalid_ code.
func emptyParam(name string) *httperr.Error {
	code := CodeInvalidQuery
	switch name {
	case "bucket":
		code = CodeInvalidBucket
	case "interval":
		code = CodeInvalidInterval
	case "start":
		code = CodeInvalidStart
	case "end":
		code = CodeInvalidEnd
	}
	return bad(code, name+" is empty; omit it to get the default or give a value")
}

// The 400s of configured routes' path parameters.
var (
	errParamID = bad(CodeInvalidParameter,
		"a path parameter must be an id: 1 to 20 decimal digits")
	errParamSlug = bad(CodeInvalidParameter,
		"a path parameter must be 1 to 64 letters, digits, '-' or '_' (no percent-escapes)")
)
