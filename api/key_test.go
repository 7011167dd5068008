package api

import (
	"errors"
	"testing"
)

// TestParseKeyRoundTrips: every accepted request's key parses back to the
// same Request, less the client's own start of a start-only window.
func TestParseKeyRoundTrips(t *testing.T) {
	for _, tc := range goodCases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := parseTarget(t, tc.target)
			if err != nil {
				t.Fatalf("ParseRequest(%q): %v", tc.target, err)
			}
			got, err := ParseKey(q.Key(), testNow)
			if err != nil {
				t.Fatalf("ParseKey(%q): %v; want success", q.Key(), err)
			}
			q.clientStart = 0 // not in the key
			if got != q {
				t.Errorf("ParseKey(%q): got %+v; want %+v", q.Key(), got, q)
			}
		})
	}
}

// TestParseKeyRejects: keys that today's parser would never produce are
// refused, however close they come to a real one.
func TestParseKeyRejects(t *testing.T) {
	tests := []struct {
		name, key string
	}{
		{"empty", ""},
		{"other version", "v1|list"},
		{"no version", "list"},
		{"unknown endpoint", "v2|coins|bitcoin"},
		{"list with a field", "v2|list|x"},
		{"upper-case topic", "v2|whatsup|Bitcoin"},
		{"topic with a slash", "v2|whatsup|a/b"},
		{"topic with a double space", "v2|whatsup|ai  agents"},
		{"topic with a trailing space", "v2|whatsup|ai "},
		{"empty topic", "v2|whatsup|"},
		{"topic too long", "v2|whatsup|" + string(make([]byte, 65))},
		{"missing series fields", "v2|series|bitcoin|hour|1w|"},
		{"extra series field", "v2|series|bitcoin|hour|1w|||"},
		{"bucket alias", "v2|series|bitcoin|hours|1w||"},
		{"empty bucket", "v2|series|bitcoin||1w||"},
		{"unknown interval", "v2|series|bitcoin|hour|2w||"},
		{"empty interval without window", "v2|series|bitcoin|hour|||"},
		{"interval beside a window", "v2|series|bitcoin|hour|1w|1759968000|1760652000"},
		{"start not in canonical form", "v2|series|bitcoin|hour||1759968002|1760652000"},
		{"unaligned end", "v2|series|bitcoin|hour||1759968000|1760652001"},
		{"end not in canonical form", "v2|series|bitcoin|hour||1759968000|1760652001"},
		{"only end (its start is filled in)", "v2|series|bitcoin|hour|||1760652000"},
		{"leading zero", "v2|series|bitcoin|hour||01759968000|1760652000"},
		{"query injection in bucket", "v2|series|bitcoin|hour&interval=1m|1w||"},
		{"unknown metric", "v2|tsv|bitcoin|price"},
		{"metric with a path", "v2|tsv|bitcoin|x/../interactions"},
		{"tsv without metric", "v2|tsv|bitcoin"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := ParseKey(tc.key, testNow)
			if !errors.Is(err, ErrNotCanonicalKey) {
				t.Fatalf("ParseKey(%q): got %+v, %v; want an error wrapping ErrNotCanonicalKey", tc.key, q, err)
			}
			if q != (Request{}) {
				t.Errorf("ParseKey(%q): got %+v with the error; want the zero Request", tc.key, q)
			}
		})
	}
}
