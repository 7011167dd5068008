package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"time"

	"trendgate/api"
	"trendgate/internal/httperr"
	"trendgate/keystore"
)

// KeyAdmin makes the key API's changes; gateway.Gateway implements it.
// Each method's by names the admin who asked (see actor), for the audit
// log line the change writes. Refusals for bad input are *keystore.Error;
// keystore.ErrReadOnly and keystore.ErrUnavailable say the change could
// not be stored; nothing changed in any of these cases.
type KeyAdmin interface {
	CreateKey(ctx context.Context, by string, nk keystore.NewKey) (CreatedKey, error)
	RevokeKey(ctx context.Context, by, id string) (RevokedKey, error)
	RotateKey(ctx context.Context, by, id string, r RotateRequest) (CreatedKey, error)
	PatchAccount(ctx context.Context, by, id string, p keystore.AccountPatch) (AccountSettings, error)
	CreateAccount(ctx context.Context, by string, na keystore.NewAccount) (AccountSettings, error)
	DeleteAccount(ctx context.Context, by, id string) (DeletedAccount, error)
	ResetAccount(ctx context.Context, by, id string, r ResetRequest) (AccountReset, error)
}

// CreatedKey is the answer to a create or a rotation: the new key with its
// secret, shown this once and never again.
type CreatedKey struct {
	ID        string     `json:"id"`
	Secret    string     `json:"secret"`
	Account   string     `json:"account"`
	Plan      string     `json:"plan"`
	Created   time.Time  `json:"created"`
	NotBefore *time.Time `json:"not_before,omitempty"`
	Expires   *time.Time `json:"expires,omitempty"`
	// Replaces is the key a rotation ends, and when; absent on a create.
	Replaces *EndedKey `json:"replaces,omitempty"`
}

// EndedKey is the old key of a rotation.
type EndedKey struct {
	ID      string    `json:"id"`
	Expires time.Time `json:"expires"`
}

// AccountSettings is the answer to PATCH /accounts/{id}: the account's
// numbers in force after the change.
type AccountSettings struct {
	ID   string `json:"id"`
	Plan string `json:"plan"`
	// Keys are the ids of the account's keys.
	Keys []string `json:"keys"`
	// Daily and Monthly are the account's quotas in cost units (0:
	// unlimited); PerSecond and Burst size each of its keys' token bucket,
	// unless a key sets its own (0: no rate limit).
	Daily     int64   `json:"daily"`
	Monthly   int64   `json:"monthly"`
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
}

// DeletedAccount is the answer to DELETE /accounts/{id}.
type DeletedAccount struct {
	ID      string    `json:"id"`
	Deleted time.Time `json:"deleted"`
}

// RevokedKey is the answer to a revocation.
type RevokedKey struct {
	ID      string    `json:"id"`
	Revoked time.Time `json:"revoked"`
	// Pending is true when the shared store (Redis) was out of reach: the
	// key is refused by the instance that answered from now on, and by
	// every other one once the revocation is stored, at the first poll
	// that reaches Redis again. The answer is then 202, not 200.
	Pending bool `json:"pending,omitempty"`
}

// RotateRequest is the body of POST /keys/{id}/rotate; both members are
// optional.
type RotateRequest struct {
	// NewID names the new key; empty means "<id>-r<n>", the first free.
	NewID string `json:"new_id"`
	// Overlap is how long the old key stays valid, as a Go duration
	// ("24h", "90m"); empty means DefaultOverlap.
	Overlap string `json:"overlap"`
}

// DefaultOverlap is how long the old key of a rotation stays valid when
// the request does not say; MaxOverlap is the longest a request may ask.
const (
	DefaultOverlap = 24 * time.Hour
	MaxOverlap     = 90 * 24 * time.Hour
)

// ResetRequest is the body of POST /accounts/{id}/reset.
type ResetRequest struct {
	// Window is "day" or "month": the quota whose current window's
	// counter goes back to zero.
	Window string `json:"window"`
}

// AccountReset is the answer to a reset.
type AccountReset struct {
	Account string `json:"account"`
	Window  string `json:"window"`
	// Cleared is what the counter held: the units given back.
	Cleared int64 `json:"cleared"`
}

// maxBody bounds a key API request body.
const maxBody = 64 << 10

var (
	errBodyType = httperr.New(http.StatusUnsupportedMediaType, api.CodeInvalidBody,
		"send the body as JSON (Content-Type: application/json)")
	errReadOnly    = httperr.New(http.StatusConflict, api.CodeKeyAPIReadOnly, keystore.ErrReadOnly.Error())
	errUnavailable = httperr.New(http.StatusServiceUnavailable, api.CodeKeysUnavailable,
		"the change could not be stored (Redis or keys_file unavailable); nothing changed, try again")
)

// registerKeyAPI adds the key API's writes, behind the admin token.
func (s *server) registerKeyAPI(mux *http.ServeMux) {
	mux.Handle("POST /keys", s.auth(http.HandlerFunc(s.serveCreate)))
	mux.Handle("DELETE /keys/{id}", s.auth(http.HandlerFunc(s.serveRevoke)))
	mux.Handle("POST /keys/{id}/rotate", s.auth(http.HandlerFunc(s.serveRotate)))
	mux.Handle("POST /accounts", s.auth(http.HandlerFunc(s.serveCreateAccount)))
	mux.Handle("DELETE /accounts/{id}", s.auth(http.HandlerFunc(s.serveDeleteAccount)))
	mux.Handle("PATCH /accounts/{id}", s.auth(http.HandlerFunc(s.servePatchAccount)))
	mux.Handle("POST /accounts/{id}/reset", s.auth(http.HandlerFunc(s.serveReset)))
}

func (s *server) serveCreate(w http.ResponseWriter, r *http.Request) {
	var nk keystore.NewKey
	if he := decodeBody(r, &nk, true); he != nil {
		httperr.Write(w, requestID(w), he)
		return
	}
	k, err := s.o.Keys.CreateKey(r.Context(), s.actor(r), nk)
	if s.refused(w, err) {
		return
	}
	writeSecret(w, k)
}

func (s *server) serveRevoke(w http.ResponseWriter, r *http.Request) {
	if he := noBody(r); he != nil {
		httperr.Write(w, requestID(w), he)
		return
	}
	k, err := s.o.Keys.RevokeKey(r.Context(), s.actor(r), r.PathValue("id"))
	if s.refused(w, err) {
		return
	}
	if k.Pending {
		writeJSON(w, http.StatusAccepted, k)
		return
	}
	writeJSON(w, http.StatusOK, k)
}

func (s *server) serveRotate(w http.ResponseWriter, r *http.Request) {
	var req RotateRequest
	if he := decodeBody(r, &req, false); he != nil {
		httperr.Write(w, requestID(w), he)
		return
	}
	k, err := s.o.Keys.RotateKey(r.Context(), s.actor(r), r.PathValue("id"), req)
	if s.refused(w, err) {
		return
	}
	writeSecret(w, k)
}

func (s *server) servePatchAccount(w http.ResponseWriter, r *http.Request) {
	var raw map[string]json.RawMessage
	if he := decodeBody(r, &raw, true); he != nil {
		httperr.Write(w, requestID(w), he)
		return
	}
	p, he := accountPatch(raw)
	if he != nil {
		httperr.Write(w, requestID(w), he)
		return
	}
	a, err := s.o.Keys.PatchAccount(r.Context(), s.actor(r), r.PathValue("id"), p)
	if s.refused(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *server) serveCreateAccount(w http.ResponseWriter, r *http.Request) {
	var na keystore.NewAccount
	if he := decodeBody(r, &na, true); he != nil {
		httperr.Write(w, requestID(w), he)
		return
	}
	a, err := s.o.Keys.CreateAccount(r.Context(), s.actor(r), na)
	if s.refused(w, err) {
		return
	}
	w.Header().Set("Location", "/accounts/"+url.PathEscape(a.ID))
	writeJSON(w, http.StatusCreated, a)
}

func (s *server) serveDeleteAccount(w http.ResponseWriter, r *http.Request) {
	if he := noBody(r); he != nil {
		httperr.Write(w, requestID(w), he)
		return
	}
	a, err := s.o.Keys.DeleteAccount(r.Context(), s.actor(r), r.PathValue("id"))
	if s.refused(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *server) serveReset(w http.ResponseWriter, r *http.Request) {
	var req ResetRequest
	if he := decodeBody(r, &req, true); he != nil {
		httperr.Write(w, requestID(w), he)
		return
	}
	if req.Window != "day" && req.Window != "month" {
		httperr.Write(w, requestID(w), httperr.New(http.StatusBadRequest, api.CodeInvalidBody, `window must be "day" or "month"`))
		return
	}
	a, err := s.o.Keys.ResetAccount(r.Context(), s.actor(r), r.PathValue("id"), req)
	if s.refused(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// writeSecret answers 201 with a new key, its secret kept out of every
// cache.
func writeSecret(w http.ResponseWriter, k CreatedKey) {
	w.Header().Set("Location", "/keys/"+url.PathEscape(k.ID))
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, k)
}

// refused answers err, if any, and reports whether it did.
func (s *server) refused(w http.ResponseWriter, err error) bool {
	if err == nil {
		return false
	}
	var ke *keystore.Error
	switch {
	case errors.As(err, &ke):
		status, code := http.StatusBadRequest, api.CodeInvalidKeyChange
		switch ke.Kind {
		case keystore.UnknownKey:
			status, code = http.StatusNotFound, api.CodeUnknownKey
		case keystore.UnknownAccount:
			status, code = http.StatusNotFound, api.CodeUnknownAccount
		case keystore.Taken:
			status, code = http.StatusConflict, api.CodeKeyIDTaken
		case keystore.Tombstoned:
			status, code = http.StatusConflict, api.CodeKeyIDRevoked
		case keystore.NotActive:
			status, code = http.StatusConflict, api.CodeKeyNotActive
		case keystore.InUse:
			status, code = http.StatusConflict, api.CodeAccountInUse
		}
		httperr.Write(w, requestID(w), httperr.New(status, code, ke.Msg))
	case errors.Is(err, keystore.ErrReadOnly):
		httperr.Write(w, requestID(w), errReadOnly)
	case errors.Is(err, keystore.ErrUnavailable):
		httperr.Write(w, requestID(w), errUnavailable)
	default:
		httperr.Write(w, requestID(w), errInternal)
	}
	return true
}

// decodeBody reads the request body as one JSON value into v, refusing
// unknown members, a second value and a body over maxBody. With required
// false an empty body leaves v as it is.
func decodeBody(r *http.Request, v any, required bool) *httperr.Error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return httperr.New(http.StatusBadRequest, api.CodeInvalidBody, "the body could not be read")
	}
	if len(b) > maxBody {
		return httperr.New(http.StatusRequestEntityTooLarge, api.CodeInvalidBody, fmt.Sprintf("the body is over %d bytes", maxBody))
	}
	if len(bytes.TrimSpace(b)) == 0 {
		if required {
			return httperr.New(http.StatusBadRequest, api.CodeInvalidBody, "this route needs a JSON object as its body")
		}
		return nil
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil ||
		(mt != "application/json" && mt != "application/merge-patch+json") {
		return errBodyType
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return httperr.New(http.StatusBadRequest, api.CodeInvalidBody, "the body is not the JSON object this route takes: "+jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return httperr.New(http.StatusBadRequest, api.CodeInvalidBody, "the body holds more than one JSON value")
	}
	return nil
}

// noBody refuses a request that carries a body where the route takes none.
func noBody(r *http.Request) *httperr.Error {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1))
	if len(b) > 0 {
		return httperr.New(http.StatusBadRequest, api.CodeInvalidBody, "this route takes no body")
	}
	return nil
}

// jsonProblem says what encoding/json found wrong: a syntax error's
// place, a member of the wrong type, or (its own words) an unknown member
// or a value that does not parse, such as a time not in RFC 3339.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te) && te.Field != "":
		return fmt.Sprintf("%s has the wrong type (want %s)", te.Field, te.Type)
	case errors.As(err, &te):
		return "want a JSON object"
	}
	return err.Error()
}

// accountPatch reads PATCH /accounts/{id}'s members: per_second, burst,
// daily and monthly, each a number or null (back to the configured value).
func accountPatch(raw map[string]json.RawMessage) (keystore.AccountPatch, *httperr.Error) {
	var p keystore.AccountPatch
	if len(raw) == 0 {
		return p, httperr.New(http.StatusBadRequest, api.CodeInvalidBody, "name at least one of per_second, burst, daily, monthly")
	}
	for name, v := range raw {
		var err error
		switch name {
		case "per_second":
			p.PerSecond, err = field[float64](v)
		case "burst":
			p.Burst, err = field[int](v)
		case "daily":
			p.Daily, err = field[int64](v)
		case "monthly":
			p.Monthly, err = field[int64](v)
		default:
			return p, httperr.New(http.StatusBadRequest, api.CodeInvalidBody,
				fmt.Sprintf("unknown member %q (known: per_second, burst, daily, monthly)", name))
		}
		if err != nil {
			return p, httperr.New(http.StatusBadRequest, api.CodeInvalidBody, fmt.Sprintf("%s must be a number or null", name))
		}
	}
	return p, nil
}

func field[T any](v json.RawMessage) (keystore.Field[T], error) {
	if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return keystore.Field[T]{Set: true}, nil
	}
	var x T
	if err := json.Unmarshal(v, &x); err != nil {
		return keystore.Field[T]{}, err
	}
	return keystore.Field[T]{Set: true, Value: &x}, nil
}

// actor names who made a request, for the audit log: the admin token's
// name ("admin.token", or a named token's id), or "local" on a listener
// without a token (same-host requests only).
func (s *server) actor(r *http.Request) string {
	if id, ok := r.Context().Value(actorKey{}).(string); ok {
		return id
	}
	return "local"
}
