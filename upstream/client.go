package upstream

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"trendgate/api"
	"trendgate/internal/breaker"
	"trendgate/internal/clock"
	"trendgate/internal/inflight"
	"trendgate/tracing"
)

// Request is one upstream call, built by the gateway from its canonical
// request. The zero value is not a valid request (Path is required).
type Request struct {
	// Endpoint is the operation called; it decides the expected body.
	Endpoint api.Endpoint
	// Path is the already escaped path, e.g.
	// "/api4/public/topic/%23ai/time-series/v1". It must start with "/" and
	// contain no query or fragment.
	Path string
	// RawQuery is the query in fixed order, e.g. "bucket=hour&interval=1w";
	// "" sends none.
	RawQuery string
	// Background marks a refresh nobody waits for: it may not use the
	// budget's refresh reserve.
	Background bool
	// Account, Weight and PerMinute name the key whose cold miss causes the
	// call, for the budget's fair share (see Claim). An empty Account is not
	// subject to it.
	Account   string
	Weight    float64
	PerMinute int
	// Reason says why the call is made, for the reason label of
	// trendgate_upstream_requests_total and the access log: one of
	// Reasons; "" means "miss". A retried attempt is counted as "retry".
	Reason string
	// Abandoned, when not nil, reports whether nobody waits for the call's
	// answer any more (every client of the coalesced fill left): such a
	// call leaves the queue for a connection slot instead of taking one.
	Abandoned func() bool
	// Sent, when not nil, is called once for every attempt the budget paid
	// for, as it starts (a retry is a second one; the same attempts
	// trendgate_upstream_requests_total counts); never for a call the
	// breaker or the budget refused.
	Sent func()
}

// Reasons are the values of Request.Reason: a client's cold miss, the
// refresh of a stale entry (in the background or with a client waiting), a
// wider window fetched to cut a client's window from it, and a fetch made
// because another instance's lease on the key ran out without an answer.
var Reasons = []string{"miss", "refresh", "widen", "lease_timeout"}

// reasonLabel bounds the label to Reasons ("miss" for anything else).
func reasonLabel(r string) string {
	for _, known := range Reasons {
		if r == known {
			return r
		}
	}
	return "miss"
}

// Response is a validated upstream answer.
type Response struct {
	// Status is 200; 404 for an unknown topic (cache it negatively); or
	// 400, the upstream refusing the request itself (Body nil; keep it
	// briefly rather than ask again).
	Status int
	// ContentType is the upstream's Content-Type, or the shape's default
	// when it sent none.
	ContentType string
	// Body is the decompressed body, validated for the Endpoint; nil for 404.
	Body []byte
	// Generated is config.generated, else x-lunar-generated, else 0.
	Generated int64
	// Empty marks a 200 whose data is empty (unknown topic): cache it
	// negatively.
	Empty bool
	// Received is when the upstream's answer arrived (its status line and
	// headers), by the client's clock: the answer's age counts from here.
	Received time.Time
}

// Option configures a Client.
type Option func(*Client)

// WithBudget makes the client spend b, e.g. a shared RedisBudget. Without
// it the client builds a LocalBudget from cfg.Budget; nil is ignored.
func WithBudget(b Budget) Option {
	return func(c *Client) {
		if b != nil {
			c.budget = b
		}
	}
}

// WithTransport makes the client send through rt instead of its own
// transport (tests); nil is ignored.
func WithTransport(rt http.RoundTripper) Option {
	return func(c *Client) {
		if rt != nil {
			c.rt = rt
		}
	}
}

// WithTracing makes the client trace its calls with tp: each attempt is a
// CLIENT span made by the instrumented transport (otelhttp), which sends
// the upstream a W3C traceparent naming it (and no other trace header:
// tracing.Outgoing); a wait for the outbound budget
// is a span of its own; retries and the upstream's status and rate-limit
// headers are recorded on the span in the caller's context (the gateway's
// fetch span). Nil (the default) traces nothing and adds no work.
func WithTracing(tp trace.TracerProvider) Option {
	return func(c *Client) { c.tp = tp }
}

// WithInflight makes the client take the bytes of each 200 body it reads
// and checks from b (see readOK), so that concurrent reads of large bodies
// queue instead of all holding their buffers at once; nil (the default)
// bounds nothing.
func WithInflight(b *inflight.Bound) Option {
	return func(c *Client) { c.inflight = b }
}

// Client calls the upstream with the gateway's own credential, spending
// the outbound budget and honouring the circuit breaker. Build it with New;
// the zero value is not usable. It is safe for concurrent use.
type Client struct {
	cfg     Config
	base    string // cfg.BaseURL without a trailing slash
	clk     clock.Clock
	log     *zap.Logger
	metrics *Metrics
	budget  Budget
	breaker *breaker.Breaker
	rt      http.RoundTripper // the transport; c.http may wrap it (tracing)
	http    *http.Client
	// tp and tracer trace the client's calls; nil when tracing is off.
	tp     trace.TracerProvider
	tracer trace.Tracer
	events budgetEvents // logs the budget's changes of state
	// withdrawn holds, per account, when Withdraw last reached the budget
	// (unix ns), so a flood of refusals withdraws once a second. Bounded
	// by the accounts the gateway authenticates.
	withdrawn sync.Map
	// inflight bounds the bytes of bodies being read and checked; nil
	// bounds nothing.
	inflight *inflight.Bound
	// conns holds one of MaxConns slots per call in flight (its retry
	// included), taken before the budget is spent and the transport is
	// asked for a connection, and shared among accounts (see slots). Go's
	// Transport queues a request that waits for a connection beyond
	// MaxConnsPerHost and removes it, when its context ends, only from
	// the front of the queue (golang/go#76784): every request abandoned
	// behind one that still waits stayed queued, its whole context chain
	// with it, until that one was served. Waiters for a slot leave as soon
	// as their context ends, so the transport never queues.
	conns *slots
}

// busyRetry is the Retry-After of an ErrBusy: slots free as answers
// arrive, so a retry soon has a fair chance.
const busyRetry = time.Second

// errFetchTimeout is the cause of the whole-fetch deadline set by Do.
var errFetchTimeout = errors.New("upstream: fetch timeout")

// maxJitter bounds the random wait before a retry.
const maxJitter = 200 * time.Millisecond

// New returns a Client for cfg, which must pass Validate. clk nil means the
// wall clock, log nil discards logs and m nil uses unregistered metrics.
func New(cfg Config, clk clock.Clock, log *zap.Logger, m *Metrics, opts ...Option) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, errors.Join(errors.New("upstream: invalid config"), err)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	c := &Client{
		cfg:     cfg,
		base:    strings.TrimRight(cfg.BaseURL, "/"),
		clk:     clk,
		log:     log.Named("upstream"),
		metrics: m,
		conns:   newSlots(cfg.MaxConns, cfg.SlotReserve),
	}
	c.events.log = c.log.Named("budget")
	c.breaker = breaker.New("upstream", breaker.Config(cfg.Breaker),
		breaker.Options{Clock: clk, Logger: c.log, Metrics: m.Breakers})
	for _, o := range opts {
		o(c)
	}
	if c.budget == nil {
		b, err := NewLocalBudget(cfg.Budget, clk)
		if err != nil {
			return nil, err
		}
		b.events = &c.events
		c.budget = b
	}
	if c.rt == nil {
		c.rt = newTransport(cfg)
	}
	var send http.RoundTripper = c.rt
	if c.tp != nil {
		c.tracer = c.tp.Tracer("trendgate/upstream")
		send = otelhttp.NewTransport(c.rt,
			otelhttp.WithTracerProvider(c.tp),
			otelhttp.WithPropagators(tracing.Outgoing), // traceparent only: never a client's tracestate or baggage
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " upstream" }))
	}
	c.http = &http.Client{
		Transport: send,
		// Redirects are never followed; a 3xx is a bad response.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	b := cfg.Budget.Resolved()
	m.BudgetLimit.WithLabelValues("minute").Set(budgetLimit(b.PerMinute))
	m.BudgetLimit.WithLabelValues("day").Set(budgetLimit(b.PerDay))
	c.reportTokens()
	return c, nil
}

// budgetLimit is a budget window's size for the BudgetLimit gauge: -1 for
// 0 (unlimited).
func budgetLimit(n int) float64 {
	if n <= 0 {
		return -1
	}
	return float64(n)
}

// newTransport builds the pooled transport for cfg. Compression is handled
// by the client itself so the size cap applies to decompressed bytes.
func newTransport(cfg Config) *http.Transport {
	d := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   cfg.DialTimeout + 3*time.Second,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		MaxConnsPerHost:       cfg.MaxConns,
		MaxIdleConns:          cfg.MaxConns,
		MaxIdleConnsPerHost:   cfg.MaxConns,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
	}
}

// Close releases idle connections (and their goroutines). The client stays
// usable; new calls open new connections.
func (c *Client) Close() {
	if ci, ok := c.rt.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// State returns the circuit breaker's state, for readiness and metrics.
func (c *Client) State() breaker.State { return c.breaker.State() }

// withdrawEvery is how often one account's Withdraw reaches the budget.
const withdrawEvery = time.Second

// Withdraw tells the budget that account cannot be served for now (its own
// quota or rate refused it), so it holds no fair-share reservation until
// its next claim; see Budget.Withdraw. Repeated withdrawals of one account
// reach the budget at most once per second.
func (c *Client) Withdraw(ctx context.Context, account string) {
	if account == "" {
		return
	}
	now := c.clk.Now().UnixNano()
	if last, ok := c.withdrawn.Load(account); ok && now-last.(int64) < int64(withdrawEvery) {
		return
	}
	c.withdrawn.Store(account, now)
	c.budget.Withdraw(ctx, account)
}

// Do fetches req from the upstream. It returns a Response for a valid 200,
// a 404 or a 400, and otherwise an error wrapping one of ErrBudgetExhausted,
// ErrShareExhausted, ErrRateLimited, ErrBreakerOpen, ErrBusy (these five
// carry RetryAfter), ErrTimeout, ErrUnavailable or ErrBadResponse, or
// ctx's error when the caller gave up. No request is made while the
// breaker is open, no connection slot is free for the account within
// SlotWait, or the budget refuses; a call waits for its slot before it
// spends the budget, and its Timeout starts once it holds one.
func (c *Client) Do(ctx context.Context, req Request) (*Response, error) {
	if !req.Endpoint.Valid() || !strings.HasPrefix(req.Path, "/") ||
		strings.ContainsAny(req.Path, "?#") || strings.Contains(req.RawQuery, "#") {
		return nil, errors.New("upstream: invalid request")
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		c.metrics.Errors.WithLabelValues(resultOf(resp, err)).Inc()
	}
	c.reportTokens()
	return resp, err
}

// resultOf names the outcome of Do for metrics.
func resultOf(resp *Response, err error) string {
	switch {
	case err == nil && resp.Status == http.StatusNotFound:
		return "not_found"
	case err == nil && resp.Status == http.StatusBadRequest:
		return "rejected"
	case err == nil && resp.Empty:
		return "empty"
	case err == nil:
		return "ok"
	case errors.Is(err, ErrBudgetExhausted):
		return "budget"
	case errors.Is(err, ErrShareExhausted):
		return "share"
	case errors.Is(err, ErrRateLimited):
		return "rate_limited"
	case errors.Is(err, ErrBreakerOpen):
		return "breaker_open"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrBadResponse):
		return "bad_response"
	}
	return "canceled"
}

// attemptResult is the outcome of one HTTP attempt.
type attemptResult struct {
	resp      *Response
	err       error
	outcome   breaker.Outcome
	retryable bool // a connection error before any response
}

func (c *Client) do(parent context.Context, req Request) (*Response, error) {
	probe, wait, ok := c.breaker.Allow()
	if !ok {
		c.metrics.Refusals.WithLabelValues(req.Endpoint.String(), "breaker_open").Inc()
		return nil, withWait(ErrBreakerOpen, wait)
	}
	// A wait for a local slot says nothing of the upstream: it is bounded
	// on its own, refused as busy, and never counted by the breaker.
	release, err := c.slot(parent, req)
	if err != nil {
		c.breaker.Record(breaker.Neutral, probe, nil)
		switch {
		case errors.Is(err, errAbandoned):
			c.metrics.Refusals.WithLabelValues(req.Endpoint.String(), "abandoned").Inc()
			return nil, withWait(errAbandoned, busyRetry)
		case errors.Is(err, ErrBusy):
			c.metrics.Refusals.WithLabelValues(req.Endpoint.String(), "busy").Inc()
			return nil, withWait(ErrBusy, busyRetry)
		}
		return nil, fmt.Errorf("upstream: %w", err)
	}
	defer release() // after the last attempt's body is drained and closed
	ctx, cancel := context.WithTimeoutCause(parent, c.cfg.Timeout, errFetchTimeout)
	defer cancel()

	var last attemptResult
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := jitter(ctx); err != nil {
				break // out of time: report the connection error we had
			}
		}
		v, err := c.take(ctx, req, attempt)
		if err != nil || !v.OK {
			if attempt > 0 {
				break
			}
			c.metrics.Refusals.WithLabelValues(req.Endpoint.String(), refusalReason(v, err)).Inc()
			c.breaker.Record(breaker.Neutral, probe, nil)
			if perr := parent.Err(); perr != nil {
				return nil, fmt.Errorf("upstream: %w", perr)
			}
			if err != nil {
				return nil, fmt.Errorf("%w: budget: %w", ErrUnavailable, err)
			}
			if v.Cap {
				return nil, withWait(ErrCapReached, v.RetryAfter)
			}
			if v.Share {
				return nil, withWait(ErrShareExhausted, v.RetryAfter)
			}
			if v.Upstream {
				// One cause, one answer: the upstream's own limit, as for
				// the call that first met its 429.
				return nil, withWait(ErrRateLimited, v.RetryAfter)
			}
			if !req.Background && !v.Demand {
				// A background refusal only means the refresh reserve is
				// reached, a demand hold that the calls left are kept for
				// requests asked more; a cold miss refused otherwise means
				// the window is out.
				c.events.exhausted(c.clk.Now(), exhaustedWindow(c.budget, v.RetryAfter), v.RetryAfter)
			}
			return nil, withWait(ErrBudgetExhausted, v.RetryAfter)
		}
		if attempt > 0 {
			c.metrics.Retries.Inc()
			if c.tracer != nil {
				trace.SpanFromContext(ctx).AddEvent("retry", trace.WithAttributes(
					attribute.Int("upstream.attempt", attempt+1), attribute.String("upstream.previous_error", errString(last.err))))
			}
		}
		if req.Sent != nil {
			req.Sent()
		}
		last = c.attempt(ctx, parent, req)
		reason := reasonLabel(req.Reason)
		if attempt > 0 {
			reason = "retry"
		}
		c.metrics.Requests.WithLabelValues(req.Endpoint.String(), resultOf(last.resp, last.err), reason).Inc()
		if !last.retryable || attempt >= c.cfg.Retries || parent.Err() != nil {
			break
		}
	}
	c.breaker.Record(last.outcome, probe, last.err)
	return last.resp, last.err
}

// slot waits for one of the connection slots for req's account (see
// slots), at most SlotWait, and records how long it waited.
func (c *Client) slot(ctx context.Context, req Request) (func(), error) {
	start := c.clk.Now()
	release, err := c.conns.acquire(ctx, req.Account, req.Weight, c.cfg.SlotWait, req.Abandoned)
	c.metrics.SlotWait.Observe(c.clk.Now().Sub(start).Seconds())
	return release, err
}

// take spends one call of the outbound budget for req's attempt (0 for
// the first). With tracing on, the wait and its verdict are a span.
func (c *Client) take(ctx context.Context, req Request, attempt int) (Verdict, error) {
	claim := Claim{Account: req.Account, Weight: req.Weight, PerMinute: req.PerMinute, Background: req.Background, Key: req.key()}
	if c.tracer == nil {
		return c.budget.Take(ctx, claim)
	}
	ctx, span := c.tracer.Start(ctx, "upstream budget", trace.WithAttributes(
		attribute.String("trendgate.tenant", req.Account), attribute.Bool("upstream.background", req.Background),
		attribute.Int("upstream.attempt", attempt+1)))
	defer span.End()
	v, err := c.budget.Take(ctx, claim)
	verdict := "granted"
	if err != nil || !v.OK {
		verdict = refusalReason(v, err)
		span.SetStatus(codes.Error, verdict)
		if v.RetryAfter > 0 {
			span.SetAttributes(attribute.Float64("upstream.retry_after_seconds", v.RetryAfter.Seconds()))
		}
	}
	span.SetAttributes(attribute.String("upstream.budget", verdict))
	return v, err
}

// errString is err's text, "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// noReplay is an empty request body that Go's transport cannot rewind,
// which turns its automatic retry of idempotent requests off.
type noReplay struct{}

func (noReplay) Read([]byte) (int, error) { return 0, io.EOF }
func (noReplay) Close() error             { return nil }

// refusalReason names why the budget refused a call, for metrics.
func refusalReason(v Verdict, err error) string {
	switch {
	case err != nil:
		return "budget_error"
	case v.Cap:
		return "cap"
	case v.Share:
		return "share"
	case v.Upstream:
		return "rate_limited"
	case v.Demand:
		return "demand"
	}
	return "budget"
}

// jitter waits a small random time (at most maxJitter) or until ctx ends.
func jitter(ctx context.Context) error {
	t := time.NewTimer(maxJitter/4 + rand.N(maxJitter*3/4))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attempt makes one HTTP request. ctx carries the whole-fetch deadline;
// parent is the caller's context.
func (c *Client) attempt(ctx, parent context.Context, req Request) attemptResult {
	u := c.base + req.Path
	if req.RawQuery != "" {
		u += "?" + req.RawQuery
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return attemptResult{err: errors.New("upstream: invalid request"), outcome: breaker.Neutral}
	}
	// Go's transport silently resends a GET without a body on another
	// connection when a reused one fails after the request was written,
	// which would spend upstream budget that Take never saw. A body that
	// cannot be rewound (no GetBody) makes the request non-replayable, so
	// every attempt is one Do made here and paid for; the empty body is
	// found empty before the request is written and nothing is sent.
	hreq.Body = noReplay{}
	hreq.Header = http.Header{
		"Accept":          {accept(req.Endpoint)},
		"Accept-Encoding": {"gzip"},
		"User-Agent":      {"trendgate"},
	}
	if c.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}

	start := c.clk.Now()
	hres, err := c.http.Do(hreq)
	received := c.clk.Now()
	defer func() {
		c.metrics.Latency.WithLabelValues(req.Endpoint.String()).Observe(c.clk.Now().Sub(start).Seconds())
	}()
	if err != nil {
		return c.transportError(ctx, parent, err)
	}
	defer func() {
		// Drain a little so the connection can be reused, then close.
		_, _ = io.Copy(io.Discard, io.LimitReader(hres.Body, 4<<10))
		hres.Body.Close()
	}()
	if c.tracer != nil {
		traceAnswer(ctx, hres)
	}
	// Record the upstream's counters even if the caller is gone.
	c.budget.Observe(context.WithoutCancel(ctx), hres.Header, hres.StatusCode)
	c.events.observed(c.clk.Now(), hres.Header, hres.StatusCode)

	switch status := hres.StatusCode; {
	case status == http.StatusOK:
		r := c.readOK(ctx, parent, req, hres)
		if r.resp != nil {
			r.resp.Received = received
		}
		return r
	case status == http.StatusNotFound:
		c.logStatus(req, hres)
		return attemptResult{
			resp:    &Response{Status: http.StatusNotFound, ContentType: contentType(req.Endpoint, hres.Header), Received: received},
			outcome: breaker.Success,
		}
	case status == http.StatusBadRequest:
		// The upstream refuses the request itself: its answer to it, from
		// a healthy upstream, and the same the next time it is asked.
		c.logStatus(req, hres)
		return attemptResult{
			resp:    &Response{Status: http.StatusBadRequest, ContentType: contentType(req.Endpoint, hres.Header), Received: received},
			outcome: breaker.Success,
		}
	case status == http.StatusTooManyRequests:
		c.metrics.RateLimited.Inc()
		c.logStatus(req, hres)
		now := c.clk.Now()
		wait := blockUntil(parseRateHeaders(hres.Header, now), hres.StatusCode, now).Sub(now)
		return attemptResult{err: withWait(ErrRateLimited, wait), outcome: breaker.Neutral}
	case status >= 500, status >= 300 && status < 400:
		c.logStatus(req, hres)
		return attemptResult{
			err:     fmt.Errorf("%w: status %d", ErrBadResponse, status),
			outcome: breaker.Failure,
		}
	default:
		// 401/402/403 and other statuses: a configuration or plan problem,
		// not an unhealthy upstream, so the breaker is left alone (a 402 for
		// one endpoint must not block the others).
		c.logStatus(req, hres)
		return attemptResult{
			err:     fmt.Errorf("%w: status %d", ErrBadResponse, status),
			outcome: breaker.Neutral,
		}
	}
}

// rateHeaderAttrs are the upstream's rate-limit headers and the span
// attributes they are recorded as.
var rateHeaderAttrs = [...]struct {
	header string
	key    attribute.Key
}{
	{hdrMinuteRemaining, "upstream.rate_limit.minute_remaining"},
	{hdrMinuteReset, "upstream.rate_limit.minute_reset"},
	{hdrDayRemaining, "upstream.rate_limit.day_remaining"},
	{hdrDayReset, "upstream.rate_limit.day_reset"},
}

// traceAnswer records the upstream's status and rate-limit headers on the
// span in ctx (the caller's fetch span), when it records.
func traceAnswer(ctx context.Context, hres *http.Response) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 1+len(rateHeaderAttrs))
	attrs = append(attrs, attribute.Int("upstream.status_code", hres.StatusCode))
	for _, h := range rateHeaderAttrs {
		if v, err := strconv.ParseInt(hres.Header.Get(h.header), 10, 64); err == nil {
			attrs = append(attrs, h.key.Int64(v))
		}
	}
	span.SetAttributes(attrs...)
}

// transportError maps an error from sending the request.
func (c *Client) transportError(ctx, parent context.Context, err error) attemptResult {
	if perr := parent.Err(); perr != nil {
		// The caller gave up or its own deadline passed: no verdict on the
		// upstream's health.
		if errors.Is(perr, context.DeadlineExceeded) {
			return attemptResult{err: fmt.Errorf("%w: caller deadline", ErrTimeout), outcome: breaker.Neutral}
		}
		return attemptResult{err: fmt.Errorf("upstream: %w", perr), outcome: breaker.Neutral}
	}
	if context.Cause(ctx) == errFetchTimeout {
		return attemptResult{err: fmt.Errorf("%w: fetch took longer than %s", ErrTimeout, c.cfg.Timeout), outcome: breaker.Failure}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return attemptResult{err: fmt.Errorf("%w: %s", ErrTimeout, netErrorKind(err)), outcome: breaker.Failure}
	}
	return attemptResult{
		err:       fmt.Errorf("%w: %s", ErrUnavailable, netErrorKind(err)),
		outcome:   breaker.Failure,
		retryable: true,
	}
}

// netErrorKind describes a transport error without quoting URLs (which
// carry the path) or anything the upstream sent.
func netErrorKind(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op + " failed"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "no response in time"
	}
	return "connection failed"
}

// readOK reads, decompresses, caps and validates a 200 body.
func (c *Client) readOK(ctx, parent context.Context, req Request, hres *http.Response) attemptResult {
	bad := func(format string, args ...any) attemptResult {
		c.log.Warn("invalid upstream body", zap.String("path", req.Path),
			zap.String("shape", req.Endpoint.String()), zap.String("problem", fmt.Sprintf(format, args...)))
		return attemptResult{
			err:     fmt.Errorf("%w: "+format, append([]any{ErrBadResponse}, args...)...),
			outcome: breaker.Failure,
		}
	}
	limit := c.cfg.MaxBodyBytes
	if hres.ContentLength > limit {
		return bad("body of %d bytes exceeds %d", hres.ContentLength, limit)
	}
	var r io.Reader = io.LimitReader(hres.Body, limit+1)
	declared := hres.ContentLength // of what is read: the encoded bytes
	var grant inflight.Grant
	defer func() { grant.Release() }()
	switch enc := strings.ToLower(strings.TrimSpace(hres.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		if declared > 0 {
			// The size is known before a byte is read: wait for room
			// first, so that the buffers are allocated only with it.
			var err error
			if grant, err = c.inflight.Acquire(ctx, checkedBytes(declared)); err != nil {
				return c.waitError(ctx, parent, err)
			}
		}
	case "gzip":
		declared = -1
		zr, err := gzip.NewReader(r)
		if err != nil {
			return c.bodyError(ctx, parent, err, bad)
		}
		defer zr.Close()
		r = io.LimitReader(zr, limit+1)
	default:
		return bad("unsupported content encoding")
	}
	body, err := readBody(r, declared)
	if err != nil {
		return c.bodyError(ctx, parent, err, bad)
	}
	if int64(len(body)) > limit {
		return bad("body exceeds %d bytes", limit)
	}
	if grant.Bytes() == 0 {
		// Compressed or unsized: its size is known only now. Waiting holds
		// this body (at most max_conns of them) but no bytes of the bound,
		// so it cannot deadlock.
		if grant, err = c.inflight.Acquire(ctx, checkedBytes(int64(len(body)))); err != nil {
			return c.waitError(ctx, parent, err)
		}
	}
	chk, err := checkBody(req.Endpoint, body)
	if err != nil {
		return bad("%v", err)
	}
	gen := chk.generated
	if gen == 0 {
		if v, err := strconv.ParseInt(hres.Header.Get("X-Lunar-Generated"), 10, 64); err == nil && v > 0 {
			gen = v
		}
	}
	return attemptResult{
		resp: &Response{
			Status:      http.StatusOK,
			ContentType: contentType(req.Endpoint, hres.Header),
			Body:        body,
			Generated:   gen,
			Empty:       chk.empty,
		},
		outcome: breaker.Success,
	}
}

// checkedBytes is what reading and checking a body of n bytes keeps alive
// at once: the body (checkBody streams it, holding one item at a time).
func checkedBytes(n int64) int64 { return n }

// waitError maps a wait for in-flight bytes that ended with ctx (the
// fetch's deadline, or the caller gone): a timeout or a cancellation, not
// counted against the upstream's health.
func (c *Client) waitError(ctx, parent context.Context, err error) attemptResult {
	r := c.transportError(ctx, parent, err)
	r.retryable, r.outcome = false, breaker.Neutral
	return r
}

// bodyError maps an error while reading a 200 body: a deadline is a
// timeout, a broken gzip stream a bad response, anything else a broken
// connection (not retried: the upstream already answered).
func (c *Client) bodyError(ctx, parent context.Context, err error, bad func(string, ...any) attemptResult) attemptResult {
	if ctx.Err() != nil {
		r := c.transportError(ctx, parent, err)
		r.retryable = false
		return r
	}
	if errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, io.ErrUnexpectedEOF) {
		return bad("corrupt gzip body")
	}
	return attemptResult{err: fmt.Errorf("%w: connection broke while reading the body", ErrUnavailable), outcome: breaker.Failure}
}

// contentType returns the upstream's Content-Type or the shape's default.
func contentType(e api.Endpoint, h http.Header) string {
	if ct := h.Get("Content-Type"); ct != "" {
		return ct
	}
	return defaultContentType(e)
}

// logStatus logs a non-200 answer with the upstream's status and message.
// The message is logged, never returned.
func (c *Client) logStatus(req Request, hres *http.Response) {
	level := zap.WarnLevel
	if hres.StatusCode == http.StatusNotFound {
		level = zap.DebugLevel
	}
	ce := c.log.Check(level, "upstream answered an error status")
	if ce == nil {
		return
	}
	ce.Write(zap.Int("status", hres.StatusCode), zap.String("path", req.Path),
		zap.String("shape", req.Endpoint.String()), zap.String("message", upstreamMessage(hres.Body)))
}

// upstreamMessage extracts the "error" text of an upstream error body,
// reading at most 4 KiB and returning at most 200 bytes.
func upstreamMessage(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, 4<<10))
	var e struct {
		Error string `json:"error"`
	}
	msg := string(b)
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	msg = strings.ToValidUTF8(msg, "?")
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

// reportTokens updates the budget gauges when the budget can tell.
func (c *Client) reportTokens() {
	if tr, ok := c.budget.(tokenReporter); ok {
		m, d := tr.tokens()
		c.metrics.BudgetTokens.WithLabelValues("minute").Set(float64(m))
		c.metrics.BudgetTokens.WithLabelValues("day").Set(float64(d))
	}
}

// readBody reads r to its end. With a declared length (an identity body's
// Content-Length; -1 when unknown) it reads into a buffer of exactly that
// size: no garbage from regrowing, and a cached body costs what it holds.
// Otherwise it grows as it reads (io.ReadAll doubles, so up to half the
// buffer is spare) and keeps a copy of just the body unless the buffer
// happened to end full: the cache charges an entry by capacity, and a
// body is held for as long as its entry.
func readBody(r io.Reader, declared int64) ([]byte, error) {
	if declared > 0 {
		body := make([]byte, declared)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if cap(body) != len(body) {
		body = bytes.Clone(body)
	}
	return body, nil
}
