// Package upstream is trendgate's client for the analytics upstream.
//
// A Client builds every request from scratch (configured base URL, the
// gateway's already escaped path and fixed-order query, the gateway's own
// Bearer credential, no client header), never follows redirects, bounds
// each fetch in time and size, and validates a 200 body against the
// endpoint's Shape before returning it. Around each attempt sit:
//
//   - the outbound Budget: the account-wide per-minute and per-day request
//     windows (LocalBudget in process, RedisBudget shared by all instances),
//     reconciled with the upstream's x-rate-limit-* headers and blocked
//     after an upstream 429 until its reset;
//   - the connection slots (MaxConns), shared by account like the budget
//     (see slots): a call waits for one, at most SlotWait, before it
//     spends the budget, and a wait that runs out is ErrBusy;
//   - a circuit breaker that opens after consecutive failures of the
//     upstream itself (never a local wait, never its 400) and lets one
//     probe through after a doubling backoff;
//   - at most cfg.Retries retries, for connection errors only.
//
// Failures are reported as wrapped sentinel errors (ErrBudgetExhausted,
// ErrShareExhausted, ErrRateLimited, ErrBreakerOpen, ErrBusy, ErrTimeout,
// ErrUnavailable, ErrBadResponse); RetryAfter extracts the wait hint. The
// upstream's 400 is a Response, its answer to the request. Error strings never
// contain upstream bodies or the API key.
package upstream
