package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"math/big"
	"strings"
	"testing"
)

// fixedKey returns a deterministic, well-formed key derived from seed, so
// tests do not depend on crypto/rand.
func fixedKey(seed byte) string {
	var raw [rawLen]byte
	for i := range raw {
		raw[i] = seed*31 + byte(i)*7
	}
	return keyFromRaw(&raw)
}

// decodeBase62 is an independent oracle: it reads s as a base62 number with
// math/big.
func decodeBase62(t testing.TB, s string) *big.Int {
	t.Helper()
	n := new(big.Int)
	for i := 0; i < len(s); i++ {
		d := strings.IndexByte(alphabet, s[i])
		if d < 0 {
			t.Fatalf("decodeBase62: byte %q not in alphabet", s[i])
		}
		n.Mul(n, big.NewInt(62))
		n.Add(n, big.NewInt(int64(d)))
	}
	return n
}

func TestGenerate(t *testing.T) {
	a, err := Generate()
	if err != nil {
		t.Fatalf("Generate: got error %v; want nil", err)
	}
	b, err := Generate()
	if err != nil {
		t.Fatalf("Generate: got error %v; want nil", err)
	}
	for _, k := range []string{a, b} {
		if err := CheckFormat(k); err != nil {
			t.Errorf("CheckFormat(generated key): got %v; want nil", err)
		}
		if len(k) != 52 {
			t.Errorf("len(generated key) = %d; want 52", len(k))
		}
		if !strings.HasPrefix(k, Prefix) {
			t.Errorf("generated key does not start with %q", Prefix)
		}
	}
	if a == b {
		t.Errorf("two generated keys are equal; want different")
	}
	if Digest(a) == Digest(b) {
		t.Errorf("two generated keys have equal digests; want different")
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("entropy gone") }

func TestGenerateReaderError(t *testing.T) {
	k, err := generateFrom(failingReader{})
	if err == nil {
		t.Fatalf("generateFrom(failing reader): got nil error; want one")
	}
	if k != "" {
		t.Errorf("generateFrom(failing reader): got a key; want \"\"")
	}
	if !strings.HasPrefix(err.Error(), "auth: ") {
		t.Errorf("error %q: want prefix %q", err, "auth: ")
	}
}

// TestKeyLayout checks the documented format against math/big and
// hash/crc32 for edge values of the random part.
func TestKeyLayout(t *testing.T) {
	var zeros, ones, one [rawLen]byte
	for i := range ones {
		ones[i] = 0xff
	}
	one[rawLen-1] = 1
	tests := []struct {
		name string
		raw  [rawLen]byte
	}{
		{"zero", zeros},
		{"one", one},
		{"max", ones},
		{"pattern", func() (r [rawLen]byte) {
			for i := range r {
				r[i] = byte(i*37 + 11)
			}
			return r
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := keyFromRaw(&tc.raw)
			if err := CheckFormat(k); err != nil {
				t.Fatalf("CheckFormat: got %v; want nil", err)
			}
			payload, sum := k[3:46], k[46:]
			if got, want := decodeBase62(t, payload), new(big.Int).SetBytes(tc.raw[:]); got.Cmp(want) != 0 {
				t.Errorf("payload decodes to %v; want %v", got, want)
			}
			if got, want := decodeBase62(t, sum).Uint64(), uint64(crc32.ChecksumIEEE([]byte(payload))); got != want {
				t.Errorf("checksum decodes to %d; want %d", got, want)
			}
		})
	}
	if got := decodeBase62(t, maxPayload); got.Cmp(new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))) != 0 {
		t.Errorf("maxPayload decodes to %v; want 2^256-1", got)
	}
}

func TestChecksumOfMatchesCRC32(t *testing.T) {
	for _, s := range []string{"", "a", "0000000000000000000000000000000000000000000", maxPayload, "hello, world"} {
		if got, want := checksumOf(s), crc32.ChecksumIEEE([]byte(s)); got != want {
			t.Errorf("checksumOf(%q) = %08x; want %08x", s, got, want)
		}
	}
}

func TestDigest(t *testing.T) {
	// FIPS 180-2 test vector.
	if got, want := Digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Errorf("Digest(\"abc\") = %s; want %s", got, want)
	}
	k := fixedKey(1)
	if sum := sha256.Sum256([]byte(k)); Digest(k) != hex.EncodeToString(sum[:]) {
		t.Errorf("Digest(%q) = %s; want the hex SHA-256 of the key's bytes", k, Digest(k))
	}
	if _, ok := parseDigest(Digest(k)); !ok {
		t.Errorf("Digest(key) = %q is not 64 lower-case hex", Digest(k))
	}
}

// withChar returns s with byte i replaced by c.
func withChar(s string, i int, c byte) string {
	b := []byte(s)
	b[i] = c
	return string(b)
}

// swapCase swaps ASCII upper and lower case.
func swapCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// keyWithPayload returns Prefix + payload + the payload's correct checksum,
// whatever the payload holds.
func keyWithPayload(payload string) string {
	sum := checksumOf(payload)
	var cs [checksumLen]byte
	for i := checksumLen - 1; i >= 0; i-- {
		cs[i] = alphabet[sum%62]
		sum /= 62
	}
	return Prefix + payload + string(cs[:])
}

// otherDigit returns a base62 digit different from c and no larger than '2'.
func otherDigit(c byte) byte {
	if c == '1' {
		return '2'
	}
	return '1'
}

// flipChecksumDigit changes the last character to a different base62 digit.
func flipChecksumDigit(k string) string {
	last := k[len(k)-1]
	if last == '0' {
		return withChar(k, len(k)-1, '1')
	}
	return withChar(k, len(k)-1, '0')
}

func TestCheckFormat(t *testing.T) {
	valid := fixedKey(3)
	payload := valid[3:46]
	// A payload above 2^256-1 with a checksum that matches it, so only the
	// range check can refuse it.
	tooBigKey := keyWithPayload(strings.Repeat("z", payloadLen))
	tests := []struct {
		name  string
		token string
		want  Reason // "" means valid
	}{
		{"valid", valid, ""},
		{"valid, max payload", keyWithPayload(maxPayload), ""},
		{"empty", "", ReasonMalformed},
		{"prefix only", Prefix, ReasonMalformed},
		{"truncated", valid[:len(valid)-1], ReasonMalformed},
		{"extra byte", valid + "0", ReasonMalformed},
		{"upper-case prefix", "TG_" + valid[3:], ReasonMalformed},
		{"mixed-case prefix", "Tg_" + valid[3:], ReasonMalformed},
		{"dash prefix", "tg-" + valid[3:], ReasonMalformed},
		{"no prefix, same length", "xx_" + valid[3:], ReasonMalformed},
		{"upper-cased key", strings.ToUpper(valid), ReasonMalformed},
		{"swapped case", swapCase(valid), ReasonMalformed},
		{"space inside", withChar(valid, 10, ' '), ReasonMalformed},
		{"dash inside", withChar(valid, 10, '-'), ReasonMalformed},
		{"underscore inside", withChar(valid, 10, '_'), ReasonMalformed},
		{"padding", withChar(valid, len(valid)-1, '='), ReasonMalformed},
		{"NUL", withChar(valid, 20, 0), ReasonMalformed},
		{"non-ASCII", withChar(valid, 20, 0xc3), ReasonMalformed},
		{"payload above 2^256", tooBigKey, ReasonMalformed},
		{"checksum digit changed", flipChecksumDigit(valid), ReasonChecksum},
		{"payload digit changed", Prefix + withChar(payload, 0, otherDigit(payload[0])) + valid[46:], ReasonChecksum},
		{"checksum above 2^32", Prefix + payload + "zzzzzz", ReasonChecksum},
		{"upper-cased payload keeps prefix", Prefix + strings.ToUpper(valid[3:]), ReasonChecksum},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckFormat(tc.token)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckFormat: got %v; want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("CheckFormat: got %v; want ErrInvalidKey", err)
			}
			if got := ReasonOf(err); got != tc.want {
				t.Errorf("ReasonOf: got %q; want %q", got, tc.want)
			}
			if tc.token != "" && len(tc.token) > 3 && strings.Contains(err.Error(), tc.token[3:]) {
				t.Errorf("error %q contains the token", err)
			}
		})
	}
}

func TestCheckFormatDoesNotAllocate(t *testing.T) {
	valid, bad := fixedKey(4), flipChecksumDigit(fixedKey(4))
	allocs := testing.AllocsPerRun(100, func() {
		_ = CheckFormat(valid)
		_ = CheckFormat(bad)
		_ = CheckFormat("short")
	})
	if allocs != 0 {
		t.Errorf("CheckFormat allocations per run = %v; want 0", allocs)
	}
}

func TestReasonOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Reason
	}{
		{"nil", nil, ""},
		{"missing", ErrMissingKey, ""},
		{"duplicate header", ErrDuplicateHeader, ""},
		{"bare invalid", ErrInvalidKey, ""},
		{"unrelated", errors.New("x"), ""},
		{"expired", errExpired, ReasonExpired},
		{"wrapped twice", errors.Join(errors.New("ctx"), errDisabled), ReasonDisabled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReasonOf(tc.err); got != tc.want {
				t.Errorf("ReasonOf(%v) = %q; want %q", tc.err, got, tc.want)
			}
		})
	}
}

func BenchmarkCheckFormat(b *testing.B) {
	valid := fixedKey(8)
	b.ReportAllocs()
	for b.Loop() {
		_ = CheckFormat(valid)
	}
}
