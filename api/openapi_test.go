package api

import (
	"net/http"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"trendgate/internal/httperr"
)

// TestOpenAPIListsEveryErrorCode checks that each error this package
// defines is documented in openapi.yaml under its status, so a new code
// cannot be added without the document. (Real responses are validated
// against the document by TestOpenAPIContract in package proxy.)
func TestOpenAPIListsEveryErrorCode(t *testing.T) {
	var doc struct {
		Components struct {
			Responses map[string]struct {
				Content map[string]struct {
					Schema struct {
						AllOf []struct {
							Properties struct {
								Code struct {
									Enum  []string `yaml:"enum"`
									Const string   `yaml:"const"`
								} `yaml:"code"`
							} `yaml:"properties"`
						} `yaml:"allOf"`
					} `yaml:"schema"`
				} `yaml:"content"`
			} `yaml:"responses"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	documented := func(component string) []string {
		var codes []string
		for _, c := range doc.Components.Responses[component].Content {
			for _, part := range c.Schema.AllOf {
				codes = append(codes, part.Properties.Code.Enum...)
				if part.Properties.Code.Const != "" {
					codes = append(codes, part.Properties.Code.Const)
				}
			}
		}
		return codes
	}
	components := map[int]string{
		400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
		405: "MethodNotAllowed", 429: "TooManyRequests", 500: "InternalError",
		502: "BadGateway", 503: "ServiceUnavailable", 504: "GatewayTimeout",
	}
	errs := []*httperr.Error{
		ErrMissingKey, ErrInvalidKey, ErrDuplicateAuth, ErrAuthBlocked, ErrNotInPlan, ErrMetricNotInPlan,
		ErrUnknownTopic, ErrInternal, ErrBadUpstream, ErrUpstreamDown, ErrUpstreamTimeout, ErrUpstreamBreaker,
		ErrUpstreamBudget, ErrUpstreamShare, ErrUpstreamLimited, ErrHTTPSRequired, ErrNotFound, ErrMethodNotAllowed, ErrClientGone,
		errBody, errTarget, errTopicEscape, errTopicLong, errTopicChars, errMetric, errQuery, errKeyInQuery,
		errNoParams, errBucket, errInterval, errStart, errEnd, errEndEarly,
		errWindow, unknownParam("x"), errParamID, errParamSlug, ErrRouteNotLimited,
		bad("duplicate_parameter", ""), // built inline by parseQuery
		// The limiter's refusals (limits.Reason values, written by proxy).
		httperr.New(http.StatusTooManyRequests, "rate_limited", ""),
		httperr.New(http.StatusTooManyRequests, "daily_quota_exceeded", ""),
		httperr.New(http.StatusTooManyRequests, "monthly_quota_exceeded", ""),
	}
	for _, p := range paramNames {
		errs = append(errs, emptyParam(p))
	}
	for _, e := range errs {
		if e.Status == ErrClientGone.Status {
			continue // nobody receives a 499
		}
		comp, ok := components[e.Status]
		if !ok {
			t.Errorf("%s: status %d has no response in openapi.yaml", e.Code, e.Status)
			continue
		}
		if codes := documented(comp); !slices.Contains(codes, e.Code) {
			t.Errorf("%s (%d) is not among the codes of components.responses.%s: %v", e.Code, e.Status, comp, codes)
		}
	}
}
