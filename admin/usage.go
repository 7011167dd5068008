package admin

import (
	"context"
	"encoding/csv"
	"net/http"
	"strconv"
	"strings"
	"time"

	"trendgate/api"
	"trendgate/internal/httperr"
	"trendgate/rollup"
)

// HistorySource is the usage history (package rollup) and what the admin
// routes need to check names against it; gateway implements it.
type HistorySource interface {
	Query(ctx context.Context, q rollup.Query) ([]rollup.Series, error)
	// Oldest is the first day kept at now.
	Oldest(now time.Time) rollup.Date
	// KnownAccount reports whether id names an account of the
	// configuration in force (a key without one is an account of its own).
	KnownAccount(id string) bool
	// AccountOfKey returns the account of the configured key id, and
	// false when no configured key has that id.
	AccountOfKey(id string) (string, bool)
}

// UsageHistory is the body of the usage history routes: the range read
// and one Series per account (GET /usage, GET /accounts/{id}/usage) or the
// one key (GET /keys/{id}/usage).
type UsageHistory struct {
	GeneratedAt time.Time       `json:"generated_at"`
	From        rollup.Date     `json:"from"`
	To          rollup.Date     `json:"to"`
	Series      []rollup.Series `json:"series"`
	// NextCursor pages GET /usage (accounts in id order): pass it as
	// cursor= for the next page; null on the last page and on the other
	// two routes.
	NextCursor *string `json:"next_cursor"`
}

// NextCursorHeader carries GET /usage's next_cursor on a CSV answer.
const NextCursorHeader = "Trendgate-Next-Cursor"

// usageCursor pages GET /usage by account id.
const usageCursor cursor = "u1:"

var (
	errInvalidDate = httperr.New(http.StatusBadRequest, api.CodeInvalidDate,
		"from and to must be UTC dates written YYYY-MM-DD")
	errInvalidRange = httperr.New(http.StatusBadRequest, api.CodeInvalidRange,
		"from must not be after to, and only from= and to= are accepted")
	errBeyondRetention = httperr.New(http.StatusBadRequest, api.CodeRangeBeyondRetention,
		"from is older than the usage history keeps (usage.retention_days)")
	errUnknownAccountID = httperr.New(http.StatusNotFound, api.CodeUnknownAccount, "no configured account has this id")
)

// registerUsage adds GET /usage, GET /accounts/{id}/usage and GET
// /keys/{id}/usage, behind the admin token.
func (s *server) registerUsage(mux *http.ServeMux) {
	mux.Handle("GET /usage", s.auth(http.HandlerFunc(s.serveUsageHistory)))
	mux.Handle("GET /accounts/{id}/usage", s.auth(http.HandlerFunc(s.serveUsageHistory)))
	mux.Handle("GET /keys/{id}/usage", s.auth(http.HandlerFunc(s.serveUsageHistory)))
}

// serveUsageHistory answers the three usage history routes: the days
// from= to to= (inclusive, UTC; from defaults to the first of this month,
// or the oldest day kept, to to today), as JSON or, when the Accept header names text/csv, CSV.
func (s *server) serveUsageHistory(w http.ResponseWriter, r *http.Request) {
	h := s.o.History
	now := s.now()
	var page PageQuery
	var from, to string
	var herr *httperr.Error
	if r.URL.Path == "/usage" {
		// Every account: paged (limit, cursor) like GET /accounts.
		herr = readListQuery(r.URL.RawQuery, usageCursor, &page, map[string]*string{"from": &from, "to": &to})
	} else {
		from, to, herr = readRange(r)
	}
	if herr != nil {
		httperr.Write(w, requestID(w), herr)
		return
	}
	q, herr := historyRange(from, to, now, h.Oldest(now))
	if herr != nil {
		httperr.Write(w, requestID(w), herr)
		return
	}
	if r.URL.Path == "/usage" {
		q.After, q.Limit = page.After, page.Limit+1 // one more tells there is a next page
	}
	id := r.PathValue("id")
	switch {
	case strings.HasPrefix(r.URL.Path, "/accounts/"):
		if !h.KnownAccount(id) {
			httperr.Write(w, requestID(w), errUnknownAccountID)
			return
		}
		q.Account = id
	case strings.HasPrefix(r.URL.Path, "/keys/"):
		account, ok := h.AccountOfKey(id)
		if !ok {
			httperr.Write(w, requestID(w), errUnknownKey)
			return
		}
		q.Account, q.Key = account, id
	}
	series, err := h.Query(r.Context(), q)
	if err != nil {
		httperr.Write(w, requestID(w), errInternal)
		return
	}
	if series == nil {
		series = []rollup.Series{}
	}
	var next *string
	if q.Limit > 0 && len(series) > page.Limit {
		series = series[:page.Limit]
		c := usageCursor.encode(series[len(series)-1].Account)
		next = &c
	}
	if wantsCSV(r) {
		if next != nil {
			w.Header().Set(NextCursorHeader, *next)
		}
		writeHistoryCSV(w, series)
		return
	}
	writeJSON(w, http.StatusOK, UsageHistory{GeneratedAt: now, From: q.From, To: q.To, Series: series, NextCursor: next})
}

// readRange reads from= and to= of one account's or key's history,
// each at most once; nothing else is accepted.
func readRange(r *http.Request) (from, to string, herr *httperr.Error) {
	for name, vs := range r.URL.Query() {
		if (name != "from" && name != "to") || len(vs) != 1 {
			return "", "", errInvalidRange
		}
		if vs[0] == "" {
			return "", "", errInvalidDate
		}
		if name == "from" {
			from = vs[0]
		} else {
			to = vs[0]
		}
	}
	return from, to, nil
}

// historyRange reads the dates from and to ("" for the default) at now,
// with oldest the first day kept. to after today reads up to today.
func historyRange(from, to string, now time.Time, oldest rollup.Date) (rollup.Query, *httperr.Error) {
	today := rollup.DateOf(now)
	// from defaults to the first of this month, or the oldest day kept
	// when the retention is shorter.
	q := rollup.Query{From: max(rollup.Date(int(today)/100*100+1), oldest), To: today}
	for _, v := range []struct {
		s string
		d *rollup.Date
	}{{from, &q.From}, {to, &q.To}} {
		if v.s == "" {
			continue
		}
		d, err := rollup.ParseDate(v.s)
		if err != nil {
			return q, errInvalidDate
		}
		*v.d = d
	}
	switch {
	case q.From > q.To:
		return q, errInvalidRange
	case q.From < oldest:
		return q, errBeyondRetention
	}
	q.To = min(q.To, today)
	return q, nil
}

// wantsCSV reports whether the Accept header asks for text/csv.
func wantsCSV(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/csv") {
				return true
			}
		}
	}
	return false
}

// historyCSVHeader is the CSV export's header: one row per series and day.
var historyCSVHeader = []string{"date", "account", "key", "units", "requests", "upstream_calls", "bytes_sent",
	"requests_2xx", "requests_4xx", "requests_429", "requests_5xx"}

// writeHistoryCSV writes series as CSV, one row per account (or key) and
// day, oldest first within each; the requests by outcome class are
// summed over the routes.
func writeHistoryCSV(w http.ResponseWriter, series []rollup.Series) {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	cw := csv.NewWriter(w)
	_ = cw.Write(historyCSVHeader)
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, s := range series {
		for _, d := range s.Days {
			var byClass [4]int64
			for _, c := range d.Endpoints {
				if int(c.Class) < len(byClass) {
					byClass[c.Class] += c.Requests
				}
			}
			_ = cw.Write([]string{d.Date.String(), s.Account, s.Key, i64(d.Units), i64(d.Requests), i64(d.UpstreamCalls), i64(d.BytesSent),
				i64(byClass[rollup.Class2xx]), i64(byClass[rollup.Class4xx]), i64(byClass[rollup.Class429]), i64(byClass[rollup.Class5xx])})
		}
	}
	cw.Flush()
}
