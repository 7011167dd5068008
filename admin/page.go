package admin

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"trendgate/api"
	"trendgate/internal/httperr"
)

// The page sizes of GET /keys and GET /accounts: DefaultPageLimit entries
// when the request does not say, MaxPageLimit at most.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// cursor is the opaque next_cursor of one list: the last id of the page
// before, behind the list's tag, base64url-encoded. A cursor stays valid
// across reloads (it names a place in the id order, not an offset), and
// one list's cursor is refused by the other.
type cursor string

const (
	keysCursor     cursor = "k1:"
	accountsCursor cursor = "a1:"
)

func (c cursor) encode(lastID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(string(c) + lastID))
}

// decode returns the id a cursor names, or false for one this list did not
// make.
func (c cursor) decode(s string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return "", false
	}
	id, ok := strings.CutPrefix(string(b), string(c))
	return id, ok && id != ""
}

var errInvalidCursor = httperr.New(http.StatusBadRequest, api.CodeInvalidCursor,
	"cursor is not one this list answered: pass next_cursor from the previous page unchanged, or leave it out for the first page")

// readListQuery reads a list route's query string: limit (1 to
// MaxPageLimit, DefaultPageLimit when absent), cursor (decoded with c into
// q.After) and the route's filters, each at most once; any other
// parameter is refused.
func readListQuery(raw string, c cursor, q *PageQuery, filters map[string]*string) *httperr.Error {
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return httperr.New(http.StatusBadRequest, api.CodeInvalidQuery, "the query string does not parse")
	}
	q.Limit = DefaultPageLimit
	for name, vs := range vals {
		if len(vs) > 1 {
			return httperr.New(http.StatusBadRequest, api.CodeDuplicateParameter, fmt.Sprintf("%s is given more than once", name))
		}
		v := vs[0]
		switch name {
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxPageLimit {
				return httperr.New(http.StatusBadRequest, api.CodeInvalidParameter,
					fmt.Sprintf("limit must be a whole number from 1 to %d (default %d)", MaxPageLimit, DefaultPageLimit))
			}
			q.Limit = n
		case "cursor":
			id, ok := c.decode(v)
			if !ok {
				return errInvalidCursor
			}
			q.After = id
		default:
			p, ok := filters[name]
			if !ok {
				return httperr.New(http.StatusBadRequest, api.CodeUnknownParameter, unknownParameter(filters))
			}
			if v == "" {
				return httperr.New(http.StatusBadRequest, api.CodeInvalidParameter, name+" must not be empty")
			}
			*p = v
		}
	}
	return nil
}

// unknownParameter says which parameters a list route takes. The unknown
// name is not echoed.
func unknownParameter(filters map[string]*string) string {
	known := []string{"limit", "cursor"}
	for _, f := range []string{"account", "state", "from", "to"} {
		if _, ok := filters[f]; ok {
			known = append(known, f)
		}
	}
	return "unknown query parameter; this route takes " + strings.Join(known, ", ")
}
