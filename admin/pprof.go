package admin

import (
	"net/http"
	"net/http/pprof"

	"trendgate/api"
	"trendgate/internal/httperr"
	"trendgate/internal/rtmetrics"
)

var errPprofOff = httperr.New(http.StatusNotFound, api.CodeNotFound,
	"profiling is off on this admin listener (admin.pprof: false)")

// pprofHandler serves net/http/pprof under /debug/pprof/, and the
// runtime's tail figures (package rtmetrics) as JSON at
// /debug/pprof/runtime-metrics, while on() reports
// true, and a JSON 404 otherwise; New puts it behind the same guard as the
// other operator routes (the admin token, or same-host requests only when no
// token is set). on is read on every request, so a reload turns it on or off.
func pprofHandler(on func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // named profiles: heap, allocs, goroutine, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/debug/pprof/runtime-metrics", rtmetrics.Handler())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !on() {
			httperr.Write(w, requestID(w), errPprofOff)
			return
		}
		mux.ServeHTTP(w, r)
	})
}
