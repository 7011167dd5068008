package admin

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"trendgate/api"
	"trendgate/internal/httperr"
)

// UsageSource reports per-key and per-account usage for GET /keys, GET
// /keys/{id} and GET /accounts; gateway.Gateway implements it. Each call
// costs what it returns, not what is configured. KeyUsage returns
// ErrUnknownKey for an id no configured key has; KeysPage returns
// ErrUnknownAccount when q.Account names no account.
type UsageSource interface {
	KeysPage(ctx context.Context, q KeyQuery) (KeyPage, error)
	KeyUsage(ctx context.Context, id string) (KeyUsage, error)
	AccountsPage(ctx context.Context, q PageQuery) (AccountPage, error)
}

// ErrUnknownKey is returned by UsageSource.KeyUsage for an id that names no
// configured key; the route answers 404 unknown_key.
var ErrUnknownKey = errors.New("admin: unknown key id")

// ErrUnknownAccount is returned by UsageSource.KeysPage for an account
// filter that names no account; the route answers 404 unknown_account.
var ErrUnknownAccount = errors.New("admin: unknown account id")

// PageQuery asks for one page of a list ordered by id: at most Limit
// entries whose id sorts after After ("" for the first page).
type PageQuery struct {
	Limit int
	After string
}

// KeyQuery is a page of keys, filtered: only the keys of Account and only
// keys in State (one of KeyStates), each when not "".
type KeyQuery struct {
	PageQuery
	Account string
	State   string
}

// KeyPage is one page of keys in id order; More says that keys follow the
// last one.
type KeyPage struct {
	Keys []KeyUsage
	More bool
}

// AccountPage is one page of accounts in id order; More says that accounts
// follow the last one.
type AccountPage struct {
	Accounts []AccountUsage
	More     bool
}

// KeyStates are the states a key can be in, as KeyUsage.State and the
// state filter of GET /keys name them.
var KeyStates = []string{"active", "disabled", "expired", "not_yet_valid", StateRevoked}

// KeyList is the body of GET /keys: one page of keys in id order, and the
// cursor of the next page (null on the last).
type KeyList struct {
	GeneratedAt time.Time  `json:"generated_at"`
	Keys        []KeyUsage `json:"keys"`
	NextCursor  *string    `json:"next_cursor"`
}

// AccountList is the body of GET /accounts: one page of accounts in id
// order, and the cursor of the next page (null on the last).
type AccountList struct {
	GeneratedAt time.Time      `json:"generated_at"`
	Accounts    []AccountUsage `json:"accounts"`
	NextCursor  *string        `json:"next_cursor"`
}

// KeyUsage is one configured key's standing, the body of GET /keys/{id}.
// It never holds the key's secret or digest.
type KeyUsage struct {
	ID   string `json:"id"`
	Plan string `json:"plan"`
	// State is active, disabled, expired, not_yet_valid (before
	// NotBefore) or revoked (through the key API; kept for
	// revoked_key_retention, with Revoked and RevokedBy).
	State string `json:"state"`
	// Revoked is when a revoked key was revoked, RevokedBy the id of the
	// admin token that did; absent for every other state.
	Revoked   *time.Time `json:"revoked,omitempty"`
	RevokedBy string     `json:"revoked_by,omitempty"`
	// Account is the key's account; for a key configured without one, the
	// key's own ID ("" is read the same way).
	Account string     `json:"account"`
	Expires *time.Time `json:"expires,omitempty"`
	// NotBefore is when the key starts being accepted; nil (absent) when
	// it is accepted from the start.
	NotBefore *time.Time `json:"not_before,omitempty"`
	// Created is when the key was issued, as configured; nil (absent)
	// when the configuration does not say.
	Created *time.Time `json:"created,omitempty"`
	// Rate is the token bucket; nil (null) when the key has no rate limit.
	Rate *RateUsage `json:"rate"`
	// Daily and Monthly are the account's quotas in cost units over UTC
	// calendar windows: every key of one account shows the same figures.
	Daily   QuotaUsage `json:"daily"`
	Monthly QuotaUsage `json:"monthly"`
	// Source says where Rate, Daily and Monthly come from: "local" (this
	// instance), "redis" (shared by every instance: the same whichever
	// answers) or "local-fallback" (Redis unavailable: this instance's
	// fallback share, whose limits are that share).
	Source string `json:"source"`
	// Last24h counts requests and charged units over the last 24 hours.
	Last24h UsageWindow `json:"last_24h"`
	// LastSeen is the time of the key's latest request seen by this
	// instance; nil (null) if none since it started.
	LastSeen *time.Time `json:"last_seen"`
	// LastUsed is the key's latest request seen by any instance: in
	// cluster mode the later of LastSeen and what the instances share
	// every 30 s through Redis (so up to 30 s behind, for 90 days),
	// otherwise LastSeen; nil (null) if none is known.
	LastUsed *time.Time `json:"last_used"`
}

// StateRevoked is the State of a key revoked through the key API.
const StateRevoked = "revoked"

// AccountUsage is one account's standing: its quotas (shared by its keys)
// and the sum of its keys' traffic.
type AccountUsage struct {
	ID   string `json:"id"`
	Plan string `json:"plan"`
	// Keys are the ids of the account's keys.
	Keys    []string   `json:"keys"`
	Daily   QuotaUsage `json:"daily"`
	Monthly QuotaUsage `json:"monthly"`
	Source  string     `json:"source"`
	// Last24h sums the account's keys' Last24h (without ByEndpoint).
	Last24h UsageWindow `json:"last_24h"`
}

// Accounts groups keys by account, in the order each account's first key
// appears: the account's quotas are its keys' (the same for each), its
// traffic the sum of theirs.
func Accounts(keys []KeyUsage) []AccountUsage {
	out := []AccountUsage{}
	index := make(map[string]int)
	for _, k := range keys {
		if k.State == StateRevoked {
			continue // no longer the account's: its figures are not there
		}
		id := api.AccountOf(k.ID, k.Account)
		i, ok := index[id]
		if !ok {
			i = len(out)
			index[id] = i
			out = append(out, AccountUsage{ID: id, Plan: k.Plan, Keys: []string{}, Daily: k.Daily, Monthly: k.Monthly,
				Source: k.Source, Last24h: UsageWindow{Scope: k.Last24h.Scope, Since: k.Last24h.Since, ByEndpoint: []UsageCount{}}})
		}
		a := &out[i]
		a.Keys = append(a.Keys, k.ID)
		w := &a.Last24h
		if w.Since.IsZero() || (!k.Last24h.Since.IsZero() && k.Last24h.Since.Before(w.Since)) {
			w.Since = k.Last24h.Since
		}
		w.Requests += k.Last24h.Requests
		w.Units += k.Last24h.Units
		w.UpstreamCalls += k.Last24h.UpstreamCalls
		w.UpstreamAbandoned += k.Last24h.UpstreamAbandoned
	}
	return out
}

// RateUsage is a key's token bucket: its refill rate, its size and the
// whole tokens in it now.
type RateUsage struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
	Tokens    int     `json:"tokens"`
}

// QuotaUsage is one quota window. Used counts units charged in the current
// window. Limit 0 means unlimited; Remaining is then nil (null) and Used
// stays 0 (the limiter does not count a window it does not limit).
type QuotaUsage struct {
	Used      int64     `json:"used"`
	Limit     int64     `json:"limit"`
	Remaining *int64    `json:"remaining"`
	ResetsAt  time.Time `json:"resets_at"`
}

// UsageWindow is a key's traffic over the 24 hours ending with the current
// hour. Scope is "instance": each instance counts the requests it answered
// (in cluster mode, add up the instances for the key's total).
type UsageWindow struct {
	Scope    string    `json:"scope"`
	Since    time.Time `json:"since"`
	Requests uint64    `json:"requests"`
	Units    uint64    `json:"units"`
	// UpstreamCalls is how many upstream requests the key's cold misses
	// caused (its fair share of the upstream budget is spent on these).
	UpstreamCalls uint64 `json:"upstream_calls"`
	// UpstreamAbandoned is the part of UpstreamCalls made for requests
	// whose client had gone (499, quota refunded) before the answer came.
	UpstreamAbandoned uint64       `json:"upstream_calls_abandoned"`
	ByEndpoint        []UsageCount `json:"by_endpoint"`
}

// UsageCount is the requests and charged units of one endpoint and status
// class (2xx, 3xx, 4xx, 429, 5xx). Units are charged only for delivered
// answers (2xx and 304).
type UsageCount struct {
	Endpoint string `json:"endpoint"`
	Status   string `json:"status"`
	Requests uint64 `json:"requests"`
	Units    uint64 `json:"units"`
}

var errUnknownKey = httperr.New(http.StatusNotFound, api.CodeUnknownKey, "no configured key has this id")

var errUnknownAccount = httperr.New(http.StatusNotFound, api.CodeUnknownAccount, "no account has this id")

var errInternal = httperr.New(http.StatusInternalServerError, api.CodeInternalError, "internal error")

// registerKeys adds GET /keys, GET /keys/{id} and GET /accounts, for
// tokens with the read or the keys scope.
func (s *server) registerKeys(mux *http.ServeMux) {
	mux.Handle("GET /keys", s.auth(http.HandlerFunc(s.serveKeys)))
	mux.Handle("GET /keys/{id}", s.auth(http.HandlerFunc(s.serveKey)))
	mux.Handle("GET /accounts", s.auth(http.HandlerFunc(s.serveAccounts)))
}

func (s *server) serveKeys(w http.ResponseWriter, r *http.Request) {
	var q KeyQuery
	he := readListQuery(r.URL.RawQuery, keysCursor, &q.PageQuery, map[string]*string{"account": &q.Account, "state": &q.State})
	if he == nil && q.State != "" && !slices.Contains(KeyStates, q.State) {
		he = httperr.New(http.StatusBadRequest, api.CodeInvalidParameter, "state must be one of "+strings.Join(KeyStates, ", "))
	}
	if he != nil {
		httperr.Write(w, requestID(w), he)
		return
	}
	page, err := s.o.Usage.KeysPage(r.Context(), q)
	switch {
	case errors.Is(err, ErrUnknownAccount):
		httperr.Write(w, requestID(w), errUnknownAccount)
		return
	case err != nil:
		httperr.Write(w, requestID(w), errInternal)
		return
	}
	list := KeyList{GeneratedAt: s.now(), Keys: page.Keys}
	if list.Keys == nil {
		list.Keys = []KeyUsage{}
	}
	if page.More && len(page.Keys) > 0 {
		c := keysCursor.encode(page.Keys[len(page.Keys)-1].ID)
		list.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *server) serveAccounts(w http.ResponseWriter, r *http.Request) {
	var q PageQuery
	if he := readListQuery(r.URL.RawQuery, accountsCursor, &q, nil); he != nil {
		httperr.Write(w, requestID(w), he)
		return
	}
	page, err := s.o.Usage.AccountsPage(r.Context(), q)
	if err != nil {
		httperr.Write(w, requestID(w), errInternal)
		return
	}
	list := AccountList{GeneratedAt: s.now(), Accounts: page.Accounts}
	if list.Accounts == nil {
		list.Accounts = []AccountUsage{}
	}
	if page.More && len(page.Accounts) > 0 {
		c := accountsCursor.encode(page.Accounts[len(page.Accounts)-1].ID)
		list.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *server) serveKey(w http.ResponseWriter, r *http.Request) {
	k, err := s.o.Usage.KeyUsage(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, ErrUnknownKey):
		httperr.Write(w, requestID(w), errUnknownKey)
		return
	case err != nil:
		httperr.Write(w, requestID(w), errInternal)
		return
	}
	writeJSON(w, http.StatusOK, k)
}
