package admin

import (
	"net/http"
	"testing"
)

// FuzzListQuery: no query string makes readListQuery panic; what it accepts
// has a limit in range, and a cursor it accepts names the id it was made
// from.
func FuzzListQuery(f *testing.F) {
	for _, seed := range []string{
		"",                               // the first page, default limit
		"limit=1000&cursor=azE6dGVhbS1h", // a keys cursor (k1:team-a)
		"cursor=YTE6YWNtZQ",              // an accounts cursor on the keys list
		"limit=0",                        // out of range
		"limit=1&limit=2",                // repeated
		"state=active&account=acme",      // filters
		"account=",                       // an empty filter
		"%zz=1",                          // a query that does not parse
		"cursor=%FF%FE",                  // not base64
		"limit=+7&cursor=azE6",           // a cursor without an id
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var q PageQuery
		var account, state string
		he := readListQuery(raw, keysCursor, &q, map[string]*string{"account": &account, "state": &state})
		if he != nil {
			if he.Status != http.StatusBadRequest {
				t.Fatalf("%q: status %d; want 400", raw, he.Status)
			}
			return
		}
		if q.Limit < 1 || q.Limit > MaxPageLimit {
			t.Fatalf("%q: accepted limit %d", raw, q.Limit)
		}
		if q.After != "" {
			if id, ok := keysCursor.decode(keysCursor.encode(q.After)); !ok || id != q.After {
				t.Fatalf("%q: cursor for %q does not round-trip (%q, %v)", raw, q.After, id, ok)
			}
		}
	})
}
