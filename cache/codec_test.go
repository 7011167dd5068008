package cache

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

func sameEntry(a, b *Entry) bool {
	return a.Key == b.Key && a.Topic == b.Topic && a.Status == b.Status && a.ContentType == b.ContentType &&
		bytes.Equal(a.Body, b.Body) && a.Generated == b.Generated &&
		a.Fetched.Equal(b.Fetched) && a.FreshUntil.Equal(b.FreshUntil)
}

func TestCodecRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		e    *Entry
	}{
		{"full", &Entry{Key: key, Topic: "bitcoin", Status: 200, ContentType: "application/json",
			Body: []byte(`{"data":[1,2,3]}`), Generated: 1763800000, Fetched: t0, FreshUntil: t0.Add(time.Minute)}},
		{"negative with empty body and zero times", &Entry{Key: "v2|whatsup|nope||||", Topic: "nope", Status: 404}},
		{"topics list", &Entry{Key: "v2|list||||", Status: 200, Body: []byte("[]"), Fetched: t0.Add(time.Nanosecond)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeEntry(encodeEntry(tc.e))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !sameEntry(got, tc.e) {
				t.Errorf("round trip = %+v; want %+v", got, tc.e)
			}
		})
	}
}

func TestCodecRejects(t *testing.T) {
	good := encodeEntry(entry(key, "bitcoin", t0, time.Minute, `{}`))
	oldSchema := bytes.Clone(good)
	oldSchema[len(codecMagic)] = schemaVersion - 1
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"bad magic", append([]byte("xyz"), good[3:]...)},
		{"old schema", oldSchema},
		{"truncated", good[:len(good)-1]},
		{"trailing byte", append(bytes.Clone(good), 0)},
		{"length beyond end", append([]byte(codecMagic+"\x01"), 0xff, 0x01)},
		{"status out of range", encodeEntry(&Entry{Key: key, Status: 7})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if e, err := decodeEntry(tc.b); !errors.Is(err, ErrInvalidEntry) {
				t.Errorf("decodeEntry = %+v, %v; want ErrInvalidEntry", e, err)
			}
		})
	}
}

// FuzzDecodeEntry checks that decoding arbitrary bytes never panics and that
// whatever decodes survives another encode/decode unchanged.
func FuzzDecodeEntry(f *testing.F) {
	// A complete, valid entry.
	f.Add(encodeEntry(entry(key, "bitcoin", t0, time.Minute, `{"data":[]}`)))
	// A negative entry with zero times and an empty body.
	f.Add(encodeEntry(&Entry{Key: "v2|whatsup|x||||", Topic: "x", Status: 404}))
	// Only the header.
	f.Add([]byte(codecMagic + "\x01"))
	// A huge declared key length.
	f.Add([]byte(codecMagic + "\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	// Nothing at all.
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b)
		if err != nil {
			return
		}
		again, err := decodeEntry(encodeEntry(e))
		if err != nil {
			t.Fatalf("re-decoding a decoded entry failed: %v", err)
		}
		if !sameEntry(again, e) {
			t.Fatalf("re-decoded %+v; want %+v", again, e)
		}
	})
}

// TestDecodedBodiesSizedToContent (issue 31): an entry read from the
// Redis tier or a snapshot is decoded from a buffer holding the whole
// record; its body is a copy of just the body, so the local tier's charge
// (by capacity) is what it holds, and the record's buffer is not kept
// alive by it.
func TestDecodedBodiesSizedToContent(t *testing.T) {
	for _, n := range []int{0, 17, 4000, 61_000, 1 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := &Entry{Key: key, Topic: "bitcoin", Status: 200, Body: bytes.Repeat([]byte("x"), n), Fetched: t0, FreshUntil: t0.Add(time.Minute)}
			rec := encodeEntry(e)
			got, err := decodeEntry(rec)
			if err != nil {
				t.Fatal(err)
			}
			if want := cap(append([]byte(nil), e.Body...)); cap(got.Body) > want {
				t.Errorf("decoded body of %d bytes has capacity %d; want at most %d (one allocation of its length)", len(got.Body), cap(got.Body), want)
			}
			if n > 0 && &got.Body[0] == &rec[len(rec)-n] {
				t.Errorf("the decoded body shares the record's buffer")
			}
		})
	}
}
