package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"trendgate/api"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway/gatewaytest"
)

// contract validates real gateway responses against api/openapi.yaml with
// kin-openapi's request and response validators, so the document cannot
// drift from what the gateway does.
type contract struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	base   string
	seen   map[string]bool // "status code" pairs validated, for the coverage check
}

func init() {
	// TSV bodies are plain text; kin-openapi has no decoder registered for
	// the media type.
	openapi3filter.RegisterBodyDecoder("text/tab-separated-values", openapi3filter.PlainBodyDecoder)
}

// newContract loads and validates the embedded document and routes its
// paths on base, the gateway under test.
func newContract(t *testing.T, base string) *contract {
	t.Helper()
	return newContractFrom(t, base, api.OpenAPI)
}

// newContractFrom is newContract on the document data (the one the admin
// listener serves, with configured routes).
func newContractFrom(t *testing.T, base string, data []byte) *contract {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		t.Fatalf("load api/openapi.yaml: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("api/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() || doc.IsOpenAPI32OrLater() {
		t.Fatalf("api/openapi.yaml declares openapi %q; want 3.1", doc.OpenAPI)
	}
	doc.Servers = openapi3.Servers{{URL: base}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &contract{t: t, doc: doc, router: router, base: base, seen: map[string]bool{}}
}

// exchange is one request the test sends and what it expects.
type exchange struct {
	name   string
	method string // "" means GET
	target string // raw request-target, escapes as sent
	key    string
	header []string // extra header name, value pairs
	status int
	code   string // error code expected; "" for success and for HEAD (no body)
	// docRejects says the document's own parameter schemas refuse the
	// request (so request validation must fail); otherwise it must pass.
	docRejects bool
	// plan is "full" or "limited" for 200 JSON bodies, which are also
	// checked against that plan's schema and not the other's.
	plan string
}

// run sends ex through h and validates the answer; it returns the response.
func (c *contract) run(h *gatewaytest.Harness, ex exchange) *http.Response {
	c.t.Helper()
	method := ex.method
	if method == "" {
		method = http.MethodGet
	}
	resp, body := h.Do(method, ex.target, ex.key, ex.header...)
	c.validate(ex, method, resp, body)
	return resp
}

func (c *contract) validate(ex exchange, method string, resp *http.Response, body []byte) {
	t := c.t
	t.Helper()
	if resp.StatusCode != ex.status {
		t.Errorf("%s: status %d; want %d (%s)", ex.name, resp.StatusCode, ex.status, body)
		return
	}
	code := ""
	if ex.status >= 400 && method != http.MethodHead { // a HEAD error has no body to read the code from
		var e struct {
			Code string `json:"code"`
		}
		if err := json.Unmarshal(body, &e); err != nil {
			t.Errorf("%s: error body %q: %v", ex.name, body, err)
		}
		code = e.Code
	}
	if code != ex.code {
		t.Errorf("%s: code %q; want %q (%s)", ex.name, code, ex.code, body)
		return
	}
	c.seen[http.StatusText(ex.status)+" "+code] = true
	// The document cannot require the rate-limit headers (a plan may have
	// no limit); every plan here has all three, so every answer given
	// after the limiter must carry them. A refusal by the plan comes
	// before the limiter (it spends nothing) and carries the policy only.
	names := []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
	if code == "endpoint_not_in_plan" || code == "metric_not_in_plan" {
		names = names[:1]
	}
	if ex.status < 400 || ex.status >= 500 || afterAuth[code] {
		for _, name := range names {
			if resp.Header.Get(name) == "" {
				t.Errorf("%s: no %s header", ex.name, name)
			}
		}
	}

	// The request as the validator sees it: the same target, parsed.
	req, err := http.NewRequest(method, c.base+ex.target, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ex.key != "" {
		req.Header.Set("Authorization", "Bearer "+ex.key)
	}
	for i := 0; i+1 < len(ex.header); i += 2 {
		req.Header.Add(ex.header[i], ex.header[i+1])
	}
	// HEAD is answered exactly as GET without a body; the document says so
	// once instead of repeating every operation, so HEAD responses are
	// checked against GET's, headers only.
	head := method == http.MethodHead
	lookup := req
	if head {
		lookup = req.Clone(req.Context())
		lookup.Method = http.MethodGet
	}
	route, params, err := c.router.FindRoute(lookup)
	var reqInput *openapi3filter.RequestValidationInput
	switch {
	case err == nil:
		// kin-openapi's gorillamux router hands path parameters over still
		// percent-encoded; OpenAPI schemas describe the decoded value.
		for k, v := range params {
			if d, err := url.PathUnescape(v); err == nil {
				params[k] = d
			}
		}
		reqInput = &openapi3filter.RequestValidationInput{
			Request: lookup, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
		}
		reqErr := openapi3filter.ValidateRequest(context.Background(), reqInput)
		if ex.docRejects && reqErr == nil {
			t.Errorf("%s: the document accepts %s %s, which the gateway refuses with %s", ex.name, method, ex.target, ex.code)
		}
		if !ex.docRejects && reqErr != nil {
			t.Errorf("%s: the document refuses %s %s: %v", ex.name, method, ex.target, reqErr)
		}
	case ex.status == http.StatusNotFound || ex.status == http.StatusMethodNotAllowed || ex.docRejects:
		// Outside the documented routes (an unknown path, another method,
		// a path parameter the router's pattern refuses): the document
		// says such requests get these component responses.
		resps := map[int]string{404: "NotFound", 405: "MethodNotAllowed", 400: "BadRequest"}
		ref := c.doc.Components.Responses[resps[ex.status]]
		if ref == nil {
			t.Fatalf("%s: no component response for %d", ex.name, ex.status)
		}
		op := openapi3.NewOperation()
		op.Responses = openapi3.NewResponses(openapi3.WithStatus(ex.status, ref))
		reqInput = &openapi3filter.RequestValidationInput{
			Request: req,
			Route:   &routers.Route{Spec: c.doc, Path: req.URL.Path, Method: method, Operation: op},
		}
	default:
		t.Errorf("%s: %s %s matches no documented route: %v", ex.name, method, ex.target, err)
		return
	}

	respInput := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: head},
	}
	if head && len(body) > 0 {
		t.Errorf("%s: HEAD answered with a %d-byte body", ex.name, len(body))
	}
	if err := openapi3filter.ValidateResponse(context.Background(), respInput); err != nil {
		t.Errorf("%s: the response does not match the document: %v\nheaders: %v\nbody: %.300s", ex.name, err, resp.Header, body)
	}
	if ex.status == http.StatusOK && ex.plan != "" && !head {
		c.checkPlan(ex, resp, body)
	}
}

// afterAuth are the 4xx codes answered after the key was accepted (the
// others come from parsing or authentication, before the limiter).
var afterAuth = map[string]bool{
	"endpoint_not_in_plan": true, "metric_not_in_plan": true, "unknown_topic": true,
	"rate_limited": true, "daily_quota_exceeded": true, "monthly_quota_exceeded": true, "upstream_share_exhausted": true,
}

// planSchemas names each JSON route's schema per plan: a response must
// match its plan's and fail the other's, so the two shapes stay distinct.
var planSchemas = map[string][2]string{ // route prefix → full, limited
	"/api4/public/topics/list/v1": {"TopicsListFull", "TopicsListLimited"},
	"whatsup":                     {"WhatsupFull", "WhatsupLimited"},
	"time-series/v1":              {"SeriesFull", "SeriesLimited"},
}

func (c *contract) checkPlan(ex exchange, resp *http.Response, body []byte) {
	t := c.t
	t.Helper()
	if got, limited := resp.Header.Get("X-Data-Mode"), ex.plan == "limited"; (got == "limited") != limited {
		t.Errorf("%s: X-Data-Mode %q for the %s plan", ex.name, got, ex.plan)
	}
	if strings.HasSuffix(strings.SplitN(ex.target, "?", 2)[0], ".tsv") {
		return
	}
	var names [2]string
	for k, v := range planSchemas {
		if strings.Contains(ex.target, k) {
			names = v
		}
	}
	if names[0] == "" {
		t.Fatalf("%s: no plan schemas for %s", ex.name, ex.target)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s: %v", ex.name, err)
	}
	own, other := names[0], names[1]
	if ex.plan == "limited" {
		own, other = other, own
	}
	opts := []openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020()}
	if err := c.doc.Components.Schemas[own].Value.VisitJSON(v, opts...); err != nil {
		t.Errorf("%s: body does not match %s: %v", ex.name, own, err)
	}
	// A limited list item is a full one without interactions_24h, which
	// the upstream may omit anyway: limited lists are told apart by
	// X-Data-Mode only (whatsup and series by config.data_mode).
	if ex.plan == "limited" && names[0] == "TopicsListFull" {
		return
	}
	if err := c.doc.Components.Schemas[other].Value.VisitJSON(v, opts...); err == nil {
		t.Errorf("%s: a %s-plan body also matches %s; the schemas do not tell the plans apart", ex.name, ex.plan, other)
	}
}

// TestOpenAPIContract sends the demo gateway requests with the full and the
// limited key on every route, and at least one request per error class,
// and validates each response (status, headers, body) and each request
// against api/openapi.yaml.
func TestOpenAPIContract(t *testing.T) {
	narrow, quota := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	h := gatewaytest.New(t, func(c *config.Config) {
		// narrow: the limited plan (burst 10) without whatsup and with one
		// TSV metric; the limited plan itself gets room for every route.
		p := c.Plans["limited"]
		p.Endpoints = []string{"list", "series", "tsv"}
		p.Fields.TSV = []string{"sentiment"}
		c.Plans["narrow"] = p
		l := c.Plans["limited"]
		l.Burst = 100
		c.Plans["limited"] = l
		// listonly: a daily quota of one list call (a plan with whatsup
		// could never be served under a quota below its cost).
		lo := c.Plans["full"]
		lo.Endpoints = []string{"list"}
		c.Plans["listonly"] = lo
		one := int64(1)
		c.Keys = append(c.Keys,
			config.Key{ID: "team-narrow", SHA256: auth.Digest(narrow), Plan: "narrow"},
			config.Key{ID: "team-quota", SHA256: auth.Digest(quota), Plan: "listonly", Daily: &one})
	}, func(o *demo.Options) { o.UnknownTopic404 = true })
	c := newContract(t, h.Base)

	// Every route with both keys, a few parameter forms.
	start := gatewaytest.Now.Add(-48 * time.Hour).Unix()
	end := gatewaytest.Now.Add(-24 * time.Hour).Unix()
	var routes = []string{
		"/api4/public/topics/list/v1",
		"/api4/public/topic/bitcoin/whatsup/v1",
		"/api4/public/topic/bitcoin/time-series/v1",
		"/api4/public/topic/Bitcoin/time-series/v1?bucket=day&interval=1m",
		"/api4/public/topic/%23ai/time-series/v1?bucket=hours&start=" + itoa(start) + "&end=" + itoa(end),
		"/api4/public/topic/ai+agents/time-series/v1?interval=all&bucket=days",
		"/api4/public/topic/ai%20agents/time-series/v1?start=" + itoa(start),
		"/topic/bitcoin/time-series/interactions.tsv",
		"/topic/bitcoin/time-series/sentiment.tsv",
	}
	etags := map[string]string{}
	for _, plan := range []string{"full", "limited"} {
		key := h.Full
		if plan == "limited" {
			key = h.Limited
		}
		for _, target := range routes {
			resp := c.run(h, exchange{name: plan + " " + target, target: target, key: key, status: 200, plan: plan})
			etags[plan+target] = resp.Header.Get("ETag")
		}
	}
	for _, target := range routes {
		c.run(h, exchange{name: "HEAD " + target, method: http.MethodHead, target: target, key: h.Full, status: 200})
	}
	c.run(h, exchange{name: "HEAD unknown topic", method: http.MethodHead, target: "/api4/public/topic/nosuchtopicxyz/time-series/v1", key: h.Full, status: 404})
	c.run(h, exchange{name: "304 full", target: routes[1], key: h.Full, header: []string{"If-None-Match", etags["full"+routes[1]]}, status: 304})
	c.run(h, exchange{name: "304 limited", target: routes[2], key: h.Limited, header: []string{"If-None-Match", etags["limited"+routes[2]]}, status: 304})

	errorCases := []exchange{
		{name: "bad bucket", target: "/api4/public/topic/bitcoin/time-series/v1?bucket=week", status: 400, code: "invalid_bucket", docRejects: true},
		{name: "bad interval", target: "/api4/public/topic/bitcoin/time-series/v1?interval=2w", status: 400, code: "invalid_interval", docRejects: true},
		{name: "leading zero start", target: "/api4/public/topic/bitcoin/time-series/v1?start=0" + itoa(start), status: 400, code: "invalid_start", docRejects: true},
		{name: "start after end", target: "/api4/public/topic/bitcoin/time-series/v1?start=" + itoa(end) + "&end=" + itoa(start), status: 400, code: "invalid_window"},
		{name: "bad topic", target: "/api4/public/topic/bit-coin/whatsup/v1", status: 400, code: "invalid_topic", docRejects: true},
		{name: "unknown parameter", target: "/api4/public/topic/bitcoin/time-series/v1?limit=5", status: 400, code: "unknown_parameter"},
		{name: "duplicate parameter", target: "/api4/public/topic/bitcoin/time-series/v1?bucket=day&bucket=day", status: 400, code: "duplicate_parameter"},
		{name: "key in query", target: "/api4/public/topics/list/v1?key=abc", status: 400, code: "key_in_query"},
		{name: "bad metric", target: "/topic/bitcoin/time-series/volume.tsv", status: 400, code: "invalid_metric", docRejects: true},
		{name: "two authorization headers", target: routes[0], key: h.Full, header: []string{"Authorization", "Bearer " + h.Limited}, status: 400, code: "duplicate_authorization"},
		{name: "missing key", target: routes[0], status: 401, code: "missing_api_key"},
		{name: "invalid key", target: routes[0], key: "tg_not-a-key", status: 401, code: "invalid_api_key"},
		{name: "endpoint not in plan", target: routes[1], key: narrow, status: 403, code: "endpoint_not_in_plan"},
		{name: "metric not in plan", target: routes[7], key: narrow, status: 403, code: "metric_not_in_plan"},
		{name: "unknown route", target: "/api4/public/coins/list/v1", key: h.Full, status: 404, code: "not_found"},
		{name: "unknown topic", target: "/api4/public/topic/nosuchtopicxyz/whatsup/v1", key: h.Full, status: 404, code: "unknown_topic"},
		{name: "POST", method: http.MethodPost, target: routes[0], key: h.Full, status: 405, code: "method_not_allowed"},
		{name: "quota: first call", target: routes[0], key: quota, status: 200, plan: "listonly"},
		{name: "quota: spent", target: routes[0], key: quota, status: 429, code: "daily_quota_exceeded"},
	}
	// The client's own usage report: the same conventions.
	errorCases = append(errorCases,
		exchange{name: "usage", target: api.UsagePath, key: h.Full, status: 200},
		exchange{name: "usage HEAD", method: http.MethodHead, target: api.UsagePath, key: h.Limited, status: 200},
		exchange{name: "usage without key", target: api.UsagePath, status: 401, code: "missing_api_key"},
		exchange{name: "usage invalid key", target: api.UsagePath, key: "tg_not-a-key", status: 401, code: "invalid_api_key"},
		exchange{name: "usage parameter", target: api.UsagePath + "?day=1", key: h.Full, status: 400, code: "unknown_parameter"},
		exchange{name: "usage POST", method: http.MethodPost, target: api.UsagePath, key: h.Full, status: 405, code: "method_not_allowed"},
	)
	for _, ex := range errorCases {
		if ex.key == "" && ex.code != "missing_api_key" && ex.status == 400 {
			ex.key = h.Full
		}
		c.run(h, ex)
	}
	// The narrow plan's burst is 10: the key is refused within a bounded
	// number of requests, and the fake clock never refills it.
	for i := range 50 {
		resp, body := h.Get(routes[0], narrow)
		if resp.StatusCode == http.StatusTooManyRequests {
			c.validate(exchange{name: "rate limited", target: routes[0], key: narrow, status: 429, code: "rate_limited"}, http.MethodGet, resp, body)
			break
		}
		if i == 49 {
			t.Fatal("the narrow key was never rate limited")
		}
	}

	// The usage report takes a token too: the narrow key's bucket is empty.
	resp, body := h.Get(api.UsagePath, narrow)
	c.validate(exchange{name: "usage rate limited", target: api.UsagePath, key: narrow, status: 429, code: "rate_limited"}, http.MethodGet, resp, body)

	// Invalid keys from one address are limited (limits.auth_failures:
	// burst 20): within a bounded number the address gets 429.
	for i := range 60 {
		resp, body := h.Get(routes[0], "tg_not-a-key")
		if resp.StatusCode == http.StatusTooManyRequests {
			c.validate(exchange{name: "auth failures", target: routes[0], key: "tg_not-a-key", status: 429, code: "too_many_auth_failures"}, http.MethodGet, resp, body)
			break
		}
		if i == 59 {
			t.Fatal("invalid keys were never refused with 429")
		}
	}

	// Upstream failures, on a gateway of their own: each cold topic meets
	// one fault.
	f := gatewaytest.New(t, func(c *config.Config) {
		c.Upstream.Timeout = 300 * time.Millisecond
		c.Upstream.Retries = 0
	})
	fc := newContract(t, f.Base)
	topics := f.Up.Topics()
	series := func(i int) string { return "/api4/public/topic/" + api.EncodeTopic(topics[i]) + "/time-series/v1" }
	f.Up.SetFault(demo.FaultRateLimit)
	fc.run(f, exchange{name: "upstream 429", target: series(0), key: f.Full, status: 503, code: "upstream_rate_limited"})
	f.Clock.Advance(time.Minute) // past the upstream's reset
	f.Up.SetFault(demo.FaultGarbage)
	fc.run(f, exchange{name: "upstream garbage", target: series(1), key: f.Full, status: 502, code: "bad_upstream_response"})
	f.Up.SetFault(demo.FaultReset)
	fc.run(f, exchange{name: "upstream reset", target: series(2), key: f.Full, status: 502, code: "upstream_unavailable"})
	f.Up.SetFault(demo.FaultHang)
	fc.run(f, exchange{name: "upstream hangs", target: series(3), key: f.Limited, status: 504, code: "upstream_timeout"})
	// More failures open the breaker: then a cold topic gets 503 at once.
	f.Up.SetFault(demo.FaultServerError)
	opened := false
	for i := 4; i < 4+f.Config.Upstream.Breaker.Failures+1 && !opened; i++ {
		resp, body := f.Get(series(i), f.Full)
		ex := exchange{name: "upstream 500", target: series(i), key: f.Full, status: resp.StatusCode, code: "bad_upstream_response"}
		if resp.StatusCode == http.StatusServiceUnavailable {
			ex.name, ex.code, opened = "breaker open", "upstream_paused", true
		}
		fc.validate(ex, http.MethodGet, resp, body)
	}
	if !opened {
		t.Errorf("the breaker never opened after %d upstream failures", f.Config.Upstream.Breaker.Failures+4)
	}

	for k := range fc.seen {
		c.seen[k] = true
	}
	for _, status := range []int{200, 304, 400, 401, 403, 404, 405, 429, 502, 503, 504} {
		found := false
		for k := range c.seen {
			found = found || strings.HasPrefix(k, http.StatusText(status)+" ")
		}
		if !found {
			t.Errorf("no %d response was validated", status)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
