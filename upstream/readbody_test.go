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
// that capacity, and one read without is trimmed when regrowing left more
// than a quarter unused; a body shorter than declared is an error.
func TestReadBodyHoldsWhatItReads(t *testing.T) {
	data := strings.Repeat("x", 1_450_000)
	for _, tc := range []struct {
		name     string
		declared int64
	}{
		{"declared", int64(len(data))},
		{"unknown", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := readBody(strings.NewReader(data), tc.declared)
			if err != nil || string(body) != data {
				t.Fatalf("got %d bytes, %v; want the %d bytes", len(body), err, len(data))
			}
			if slack := cap(body) - len(body); tc.declared > 0 && slack != 0 || slack > len(body)/4 {
				t.Errorf("capacity %d for %d bytes; want at most a quarter more (none when declared)", cap(body), len(body))
			}
		})
	}
	if _, err := readBody(bytes.NewReader([]byte("short")), 10); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a body shorter than declared: got %v; want io.ErrUnexpectedEOF", err)
	}
}
