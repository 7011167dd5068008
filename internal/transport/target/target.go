// Package target parses a request's origin-form target ("/path?query")
// into a url.URL exactly as url.ParseRequestURI does, which is how
// net/http reads it, but without ParseRequestURI's work and allocation
// for the common target: a path of characters that need no escaping.
// Both transport lanes parse each request's target with it.
package target

import (
	"net/url"
	"strings"
)

// Parse sets *u to what url.ParseRequestURI(t) returns and returns its
// error; on an error *u is left as it was.
func Parse(u *url.URL, t string) error {
	path, query, hasQuery := strings.Cut(t, "?")
	if len(path) == 0 || path[0] != '/' || !plain(path) || hasCTL(query) {
		p, err := url.ParseRequestURI(t)
		if err != nil {
			return err
		}
		*u = *p
		return nil
	}
	// url.ParseRequestURI on such a target: no scheme, no authority (a
	// request target's "//" starts a path), the path unescaped to itself
	// and escaping back to itself (so no RawPath), the query raw. A lone
	// trailing "?" sets ForceQuery.
	*u = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	return nil
}

// plain reports whether every byte of path is one url leaves alone in a
// path both ways: never part of an escape, never escaped by
// url.URL.EscapedPath.
func plain(path string) bool {
	for i := 0; i < len(path); i++ {
		if !plainByte[path[i]] {
			return false
		}
	}
	return true
}

// hasCTL reports whether s holds an ASCII control character, which
// url.ParseRequestURI refuses anywhere in a target.
func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// plainByte marks the unreserved characters and the sub-delimiters and
// separators a path keeps as they are: A-Z a-z 0-9 - . _ ~ $ & + , / : ; = @.
var plainByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~$&+,/:;=@" {
		t[c] = true
	}
	return t
}()
