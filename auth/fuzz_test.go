package auth

import (
	"errors"
	"hash/crc32"
	"math/big"
	"strings"
	"testing"
)

// FuzzAuthorization checks ParseAuthorization on arbitrary single header
// values: it never panics, fails only with this package's sentinels, and
// whatever it accepts is the tail of the value after "<bearer> ", contains no
// space and is a token68.
func FuzzAuthorization(f *testing.F) {
	key := fixedKey(50)
	seeds := []string{
		"Bearer " + key,                  // canonical
		"bearer " + key,                  // scheme case-insensitive
		"BEARER " + strings.ToUpper(key), // token returned as is
		"Bearer abc==",                   // token68 padding
		"Bearer a-b.c_d~e+f/g",           // token68 punctuation
		"",                               // empty: missing
		" \t ",                           // whitespace only: missing
		"Bearer",                         // scheme alone
		"Bearer ",                        // scheme and space, no token
		"Bearer  " + key,                 // two spaces
		"Bearer\t" + key,                 // tab separator
		" Bearer " + key,                 // leading space
		"Bearer " + key + " ",            // trailing space
		"Bearer " + key + ", x",          // comma list
		"Basic dXNlcjpwYXNz",             // other scheme
		key,                              // bare token
		"Bearer ab=cd",                   // padding in the middle
		"Bearer ==",                      // padding only
		"Bearer tok\x00",                 // NUL
		"Bearer t\xc3\xa9",               // non-ASCII
		"BEARER\u212a tok",               // Kelvin sign: Unicode folding must not apply
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tok, err := ParseAuthorization(header(v))
		if err != nil {
			if tok != "" {
				t.Fatalf("ParseAuthorization(%q): token %q returned with error %v", v, tok, err)
			}
			if !errors.Is(err, ErrMissingKey) && !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ParseAuthorization(%q): unexpected error %v", v, err)
			}
			if errors.Is(err, ErrInvalidKey) && ReasonOf(err) != ReasonMalformed {
				t.Fatalf("ParseAuthorization(%q): reason %q; want %q", v, ReasonOf(err), ReasonMalformed)
			}
			return
		}
		if !strings.Contains(v, tok) {
			t.Fatalf("ParseAuthorization(%q) = %q: not a substring of the value", v, tok)
		}
		if strings.ContainsAny(tok, " \t") {
			t.Fatalf("ParseAuthorization(%q) = %q: contains whitespace", v, tok)
		}
		if tok == "" || !isToken68(tok) {
			t.Fatalf("ParseAuthorization(%q) = %q: not a token68", v, tok)
		}
		if len(v) != len("bearer ")+len(tok) || !strings.EqualFold(v[:7], "bearer ") || v[7:] != tok {
			t.Fatalf("ParseAuthorization(%q) = %q: value is not exactly scheme, one space, token", v, tok)
		}
		// Two lines of the same accepted value are always a duplicate.
		if _, err := ParseAuthorization(header(v, v)); !errors.Is(err, ErrDuplicateHeader) {
			t.Fatalf("ParseAuthorization(two lines of %q): got %v; want ErrDuplicateHeader", v, err)
		}
	})
}

// FuzzCheckFormat checks CheckFormat against an independent decoding with
// math/big and hash/crc32: a token is accepted exactly when it is the
// prefix, a base62 payload below 2^256 and its CRC-32 in base62.
func FuzzCheckFormat(f *testing.F) {
	valid := fixedKey(60)
	seeds := []string{
		valid,                      // well formed
		keyWithPayload(maxPayload), // largest payload
		keyWithPayload(strings.Repeat("0", payloadLen)), // smallest payload
		keyWithPayload(strings.Repeat("z", payloadLen)), // payload above 2^256, valid CRC
		flipChecksumDigit(valid),                        // bad checksum
		Prefix + valid[3:46] + "zzzzzz",                 // checksum above 2^32
		"TG_" + valid[3:],                               // upper-case prefix
		strings.ToUpper(valid),                          // upper-cased key
		valid[:51],                                      // truncated
		valid + "0",                                     // too long
		withChar(valid, 30, '-'),                        // non-base62 byte
		"",                                              // empty
	}
	for _, s := range seeds {
		f.Add(s)
	}
	two256 := new(big.Int).Lsh(big.NewInt(1), 256)
	f.Fuzz(func(t *testing.T, s string) {
		err := CheckFormat(s)
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("CheckFormat(%q): error %v does not wrap ErrInvalidKey", s, err)
		}
		if r := ReasonOf(err); err != nil && r != ReasonMalformed && r != ReasonChecksum {
			t.Fatalf("CheckFormat(%q): reason %q; want malformed or checksum", s, r)
		}
		want := oracleFormat(s, two256)
		if (err == nil) != want {
			t.Fatalf("CheckFormat(%q) = %v; oracle says valid=%v", s, err, want)
		}
	})
}

// oracleFormat is a slow, independent statement of the key format.
func oracleFormat(s string, two256 *big.Int) bool {
	if len(s) != 52 || !strings.HasPrefix(s, "tg_") {
		return false
	}
	digits := "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	decode := func(p string) (*big.Int, bool) {
		n := new(big.Int)
		for _, r := range p {
			d := strings.IndexRune(digits, r)
			if d < 0 {
				return nil, false
			}
			n.Mul(n, big.NewInt(62))
			n.Add(n, big.NewInt(int64(d)))
		}
		return n, true
	}
	payload, ok := decode(s[3:46])
	if !ok || payload.Cmp(two256) >= 0 {
		return false
	}
	sum, ok := decode(s[46:])
	if !ok {
		return false
	}
	return sum.IsUint64() && sum.Uint64() == uint64(crc32.ChecksumIEEE([]byte(s[3:46])))
}
