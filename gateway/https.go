package gateway

import (
	"net/http"
	"strconv"
	"time"

	"trendgate/api"
	"trendgate/internal/httperr"
	"trendgate/proxy"
)

// httpsRequired answers every request on the plain-HTTP listener that is not
// an ACME challenge. It is not a redirect: a key sent in clear is already
// exposed, and a redirect would teach clients that plain HTTP works.
func httpsRequired() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := proxy.NewRequestID()
		w.Header().Set("X-Request-Id", id)
		w.Header().Set("Connection", "close")
		httperr.Write(w, id, api.ErrHTTPSRequired)
	})
}

// hsts adds Strict-Transport-Security to every HTTPS response; a maxAge
// under one second turns it off.
func hsts(maxAge time.Duration) func(http.Handler) http.Handler {
	secs := int64(maxAge / time.Second)
	if secs <= 0 {
		return func(next http.Handler) http.Handler { return next }
	}
	value := []string{"max-age=" + strconv.FormatInt(secs, 10)}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Strict-Transport-Security"] = value
			next.ServeHTTP(w, r)
		})
	}
}
