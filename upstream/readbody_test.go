package upstream

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReadBodyHoldsWhatItReads: the cache charges an entry by the
// capacity of its body, so a body read with a declared length has exactly
// that capacity, and one read without (gzip, or no Content-Length) holds
// no more than one allocation of its length does; a body shorter than
// declared is an error. (Regression, issue 31: an unsized body kept up to
// a quarter of spare capacity, charged and held for the entry's life.)
func TestReadBodyHoldsWhatItReads(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int
		declared bool
	}{
		{"declared", 1_450_000, true},
		{"unknown", 1_450_000, false},
		{"unknown, just past a doubling", 1<<20 + 1, false},
		{"unknown, small", 700, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := strings.Repeat("x", tc.size)
			declared := int64(-1)
			if tc.declared {
				declared = int64(len(data))
			}
			body, err := readBody(strings.NewReader(data), declared)
			if err != nil || string(body) != data {
				t.Fatalf("got %d bytes, %v; want the %d bytes", len(body), err, len(data))
			}
			want := cap(append([]byte(nil), data...)) // one allocation of the length
			if tc.declared {
				want = len(data)
			}
			if cap(body) > want {
				t.Errorf("capacity %d for %d bytes; want at most %d", cap(body), len(body), want)
			}
		})
	}
	if _, err := readBody(bytes.NewReader([]byte("short")), 10); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a body shorter than declared: got %v; want io.ErrUnexpectedEOF", err)
	}
}
