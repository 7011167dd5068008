package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrNotCanonicalKey is wrapped by every ParseKey failure.
var ErrNotCanonicalKey = errors.New("api: not a canonical cache key")

// ParseKey returns the Request whose Key is key: the inverse of Key for
// the keys today's rules produce. It rebuilds the client request the key's
// fields name (the topic through EncodeTopic), parses it with ParseRequest
// at now, and accepts the result only if its Key is key byte for byte. So a
// key of another key version, a topic or window that is not canonical
// (upper case, unaligned, an interval beside a window), a field the current
// parser would read differently, or a window whose end lies beyond now's
// bucket is refused with an error wrapping ErrNotCanonicalKey. Keys read
// back from storage (the cache snapshot) go through it, so an entry is only
// ever served under the key the current parser gives its request.
func ParseKey(key string, now time.Time) (Request, error) {
	target, ok := keyTarget(key)
	if !ok {
		return Request{}, fmt.Errorf("%w: %q", ErrNotCanonicalKey, key)
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return Request{}, fmt.Errorf("%w: %q", ErrNotCanonicalKey, key)
	}
	q, err := ParseRequest(&http.Request{Method: http.MethodGet, URL: u, RequestURI: target}, now)
	if err != nil {
		return Request{}, fmt.Errorf("%w: %q: %w", ErrNotCanonicalKey, key, err)
	}
	if q.Key() != key {
		return Request{}, fmt.Errorf("%w: %q parses back as %q", ErrNotCanonicalKey, key, q.Key())
	}
	return q, nil
}

// keyTarget rebuilds the client request-target that key's fields name, or
// reports false when key does not have the shape of any endpoint's key.
// Field values are escaped, so they can only ever land in their own place.
func keyTarget(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, keyVersion)
	if !ok {
		return "", false
	}
	f := strings.Split(rest, "|")
	switch {
	case len(f) == 1 && f[0] == "list":
		return listPath, true
	case len(f) == 2 && f[0] == "whatsup":
		return apiTopicPrefix + EncodeTopic(f[1]) + whatsupTail, true
	case len(f) == 3 && f[0] == "tsv":
		return tsvPrefix + EncodeTopic(f[1]) + tsvMiddle + url.PathEscape(f[2]) + tsvSuffix, true
	case len(f) == 6 && f[0] == "series":
		v := url.Values{}
		for i, name := range []string{"bucket", "interval", "start", "end"} {
			if f[2+i] != "" {
				v.Set(name, f[2+i])
			}
		}
		return apiTopicPrefix + EncodeTopic(f[1]) + seriesTail + "?" + v.Encode(), true
	}
	return "", false
}
