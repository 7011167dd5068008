// Package cors lets web pages on origins an operator allows call the API
// from a browser (Cross-Origin Resource Sharing). It answers preflight
// requests itself, before authentication and limits, so a preflight never
// spends a key's rate limit or quota (browsers send it without the
// Authorization header anyway), and adds the headers a browser needs to
// hand an answer, and the rate-limit and cache headers on it, to the page.
//
// CORS is off unless origins are listed: a nil *Policy adds nothing, and
// an OPTIONS request then meets the API's 405 like any other method.
package cors

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxAge is how long browsers may cache a preflight answer when
// Config.MaxAge is 0. (Chromium caps it at 2 hours, Firefox at 24.)
const DefaultMaxAge = 10 * time.Minute

// Config is the server.cors section. Its zero value is CORS off.
type Config struct {
	// AllowedOrigins are the exact origins, scheme://host[:port] in lower
	// case with no path (https://app.example.com), whose pages may call
	// the API. Empty (the default) turns CORS off. There is no wildcard:
	// each origin is named.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// MaxAge is how long a browser may reuse a preflight answer; 0 means
	// DefaultMaxAge.
	MaxAge time.Duration `yaml:"max_age"`
}

// Validate reports every problem with c, one a line, each starting with
// its path under server.cors.
func (c Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, o := range c.AllowedOrigins {
		if err := checkOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("allowed_origins[%d]: %w", i, err))
			continue
		}
		if seen[o] {
			errs = append(errs, fmt.Errorf("allowed_origins[%d]: %q is listed twice", i, o))
		}
		seen[o] = true
	}
	if c.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("max_age: must not be negative, got %s", c.MaxAge))
	}
	return errors.Join(errs...)
}

// checkOrigin accepts exactly the form a browser sends in Origin.
func checkOrigin(o string) error {
	bad := func(why string) error {
		return fmt.Errorf("%q %s; want an origin such as https://app.example.com", o, why)
	}
	if o == "*" || o == "null" {
		return bad("is not allowed: name each origin")
	}
	u, err := url.Parse(o)
	switch {
	case err != nil || u.Host == "" || u.Opaque != "":
		return bad("is not an origin")
	case u.Scheme != "https" && u.Scheme != "http":
		return bad("must start with https:// or http://")
	case u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") || strings.HasSuffix(o, "#"):
		return bad("has more than scheme, host and port (no path, not even a trailing /)")
	case strings.ToLower(o) != o:
		return bad("must be lower case, as browsers send it")
	case strings.Contains(u.Host, "*"):
		return bad("has a wildcard: name each origin")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 || (u.Scheme == "https" && p == "443") || (u.Scheme == "http" && p == "80") {
			return bad("has a port that is invalid or the scheme's default (browsers leave the default out)")
		}
	}
	return nil
}

// Headers a preflight allows (besides the CORS-safelisted ones) and the
// response headers a page may read (besides the safelisted ones).
const (
	allowMethods  = "GET, HEAD"
	allowHeaders  = "Authorization, If-None-Match, Cache-Control, X-Request-ID"
	exposeHeaders = "RateLimit, RateLimit-Policy, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, " +
		"Retry-After, X-Request-ID, Cache-Status, Age, ETag, X-Data-Mode, WWW-Authenticate"
)

// Policy is a compiled Config. A nil *Policy is CORS off.
type Policy struct {
	origins map[string]bool
	maxAge  string // seconds, for Access-Control-Max-Age
}

// New compiles c; it returns nil (CORS off) when c lists no origin. c
// must be valid.
func New(c Config) *Policy {
	if len(c.AllowedOrigins) == 0 {
		return nil
	}
	p := &Policy{origins: make(map[string]bool, len(c.AllowedOrigins))}
	for _, o := range c.AllowedOrigins {
		p.origins[o] = true
	}
	age := c.MaxAge
	if age == 0 {
		age = DefaultMaxAge
	}
	p.maxAge = strconv.FormatInt(int64(age/time.Second), 10)
	return p
}

// Serve adds the CORS headers r's response needs to w and answers r when
// it is a preflight from an allowed origin for GET or HEAD (204, nothing
// else read or spent), reporting whether it did. Everything else goes on
// to the API, which answers it as usual: a preflight from an origin not
// allowed, or for another method, meets the 405 for OPTIONS and so fails
// in the browser. Responses vary by Origin whenever CORS is on.
func (p *Policy) Serve(w http.ResponseWriter, r *http.Request) (answered bool) {
	if p == nil {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	origin := r.Header.Get("Origin")
	if origin == "" || !p.origins[origin] || len(r.Header["Origin"]) != 1 {
		return false
	}
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		switch r.Header.Get("Access-Control-Request-Method") {
		case http.MethodGet, http.MethodHead:
		default:
			return false
		}
		h.Add("Vary", "Access-Control-Request-Method")
		h.Add("Vary", "Access-Control-Request-Headers")
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Methods", allowMethods)
		h.Set("Access-Control-Allow-Headers", allowHeaders)
		h.Set("Access-Control-Max-Age", p.maxAge)
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", exposeHeaders)
	return false
}
