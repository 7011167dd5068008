package api

import (
	"errors"
	"testing"
)

// TestParseKeyRoundTrips: every accepted request's key parses back to the
// same Request.
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
		{"other version", "v2|list"},
		{"no version", "list"},
		{"unknown endpoint", "v1|coins|bitcoin"},
		{"list with a field", "v1|list|x"},
		{"upper-case topic", "v1|whatsup|Bitcoin"},
		{"topic with a slash", "v1|whatsup|a/b"},
		{"topic with a double space", "v1|whatsup|ai  agents"},
		{"topic with a trailing space", "v1|whatsup|ai "},
		{"empty topic", "v1|whatsup|"},
		{"topic too long", "v1|whatsup|" + string(make([]byte, 65))},
		{"missing series fields", "v1|series|bitcoin|hour|1w|"},
		{"extra series field", "v1|series|bitcoin|hour|1w|||"},
		{"bucket alias", "v1|series|bitcoin|hours|1w||"},
		{"empty bucket", "v1|series|bitcoin||1w||"},
		{"unknown interval", "v1|series|bitcoin|hour|2w||"},
		{"empty interval without window", "v1|series|bitcoin|hour|||"},
		{"interval beside a window", "v1|series|bitcoin|hour|1w|1759968000|1760652000"},
		{"unaligned start", "v1|series|bitcoin|hour||1759968001|1760652000"},
		{"unaligned end", "v1|series|bitcoin|hour||1759968000|1760652001"},
		{"only start", "v1|series|bitcoin|hour||1759968000|"},
		{"end beyond now's bucket", "v1|series|bitcoin|hour||1759968000|1760655600"},
		{"leading zero", "v1|series|bitcoin|hour||01759968000|1760652000"},
		{"query injection in bucket", "v1|series|bitcoin|hour&interval=1m|1w||"},
		{"unknown metric", "v1|tsv|bitcoin|price"},
		{"metric with a path", "v1|tsv|bitcoin|x/../interactions"},
		{"tsv without metric", "v1|tsv|bitcoin"},
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
