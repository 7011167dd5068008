// Package auth decides who a request comes from. It owns the API key format
// (generation, checksum, SHA-256 digest), the strict parsing of the
// Authorization header, and the lookup of a key in a Keyring of configured
// keys, which yields the request's Principal: its key id and plan name.
//
// A key is a secret the gateway never stores: configuration holds only its
// Digest. Every way a presented key can be wrong (malformed, bad checksum,
// unknown, expired, disabled) is reported as ErrInvalidKey so that clients
// see one indistinguishable answer; the Reason is for logs and metrics only.
// No error produced here ever contains the key itself.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
)

// Prefix starts every trendgate API key. It lets operators and secret
// scanners recognise a leaked key at a glance.
//
// The full format is exactly 52 ASCII bytes:
//
//	tg_ PPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPP CCCCCC   (no spaces)
//	 3            43 payload characters             6
//
// The payload is 32 bytes (256 bits) from crypto/rand written as one
// big-endian number in base62 (alphabet 0-9, A-Z, a-z, in that order),
// left-padded with '0' to 43 characters; 62^43 > 2^256, so every 256-bit
// value fits and no larger value is ever accepted. The checksum is the
// CRC-32 (IEEE) of the 43 payload bytes as ASCII, in the same base62
// alphabet, left-padded to 6 characters. The checksum only catches typos
// and truncation cheaply, before any lookup; it is not a secret.
// Keys are case-sensitive: nothing in this package folds case.
const Prefix = "tg_"

const (
	rawLen      = 32 // random bytes in a key
	payloadLen  = 43 // base62 digits needed for rawLen bytes
	checksumLen = 6  // base62 digits needed for a CRC-32
	tokenLen    = len(Prefix) + payloadLen + checksumLen

	alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// base62Value maps a byte to its base62 digit value, or -1 if the byte is
// not in the alphabet.
var base62Value = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = int8(i)
	}
	return t
}()

// maxPayload is the payload of the largest 256-bit value. Because the
// alphabet is in ASCII order, comparing two fixed-width payloads as strings
// compares the numbers they encode.
var maxPayload = func() string {
	var all [rawLen]byte
	for i := range all {
		all[i] = 0xff
	}
	p := encodePayload(&all)
	return string(p[:])
}()

// crcTable is the IEEE CRC-32 table; checksumOf walks it over a string so
// that checking a key needs no []byte conversion.
var crcTable = crc32.MakeTable(crc32.IEEE)

// Generate returns a new random API key in the format described at Prefix.
// The key is shown to the operator once; only Digest(key) belongs in
// configuration.
func Generate() (string, error) {
	return generateFrom(rand.Reader)
}

// generateFrom builds a key from 32 bytes read from r.
func generateFrom(r io.Reader) (string, error) {
	var raw [rawLen]byte
	if _, err := io.ReadFull(r, raw[:]); err != nil {
		return "", fmt.Errorf("auth: generate key: %w", err)
	}
	return keyFromRaw(&raw), nil
}

// keyFromRaw formats 32 bytes as a complete key: prefix, payload, checksum.
func keyFromRaw(raw *[rawLen]byte) string {
	payload := encodePayload(raw)
	sum := checksumOf(string(payload[:]))
	var buf [tokenLen]byte
	n := copy(buf[:], Prefix)
	n += copy(buf[n:], payload[:])
	for i := tokenLen - 1; i >= n; i-- {
		buf[i] = alphabet[sum%62]
		sum /= 62
	}
	return string(buf[:])
}

// encodePayload writes raw as a big-endian number in fixed-width base62 by
// repeated long division by 62.
func encodePayload(raw *[rawLen]byte) [payloadLen]byte {
	num := *raw
	var out [payloadLen]byte
	for i := payloadLen - 1; i >= 0; i-- {
		var rem uint
		for j := range num {
			acc := rem<<8 | uint(num[j])
			num[j] = byte(acc / 62)
			rem = acc % 62
		}
		out[i] = alphabet[rem]
	}
	return out
}

// checksumOf is the CRC-32 (IEEE) of the bytes of s; it equals
// crc32.ChecksumIEEE([]byte(s)) without converting s.
func checksumOf(s string) uint32 {
	crc := ^uint32(0)
	for i := 0; i < len(s); i++ {
		crc = crcTable[byte(crc)^s[i]] ^ (crc >> 8)
	}
	return ^crc
}

// CheckFormat reports whether token has exactly the key format described at
// Prefix. It returns nil for a well-formed key (which may still be unknown),
// and otherwise an error wrapping ErrInvalidKey whose Reason is
// ReasonMalformed or ReasonChecksum. It does not allocate and never includes
// the token in its error.
func CheckFormat(token string) error {
	if len(token) != tokenLen {
		return errLength
	}
	if token[:len(Prefix)] != Prefix {
		return errPrefix
	}
	for i := len(Prefix); i < tokenLen; i++ {
		if base62Value[token[i]] < 0 {
			return errAlphabet
		}
	}
	payload := token[len(Prefix) : len(Prefix)+payloadLen]
	if payload > maxPayload {
		return errRange
	}
	var want uint64
	for i := len(Prefix) + payloadLen; i < tokenLen; i++ {
		want = want*62 + uint64(base62Value[token[i]])
	}
	if want != uint64(checksumOf(payload)) {
		return errChecksum
	}
	return nil
}

// Digest returns the lower-case hex SHA-256 of the token's bytes: the value
// configuration stores as keys[].sha256 and KeySpec.Digest. It accepts any
// string and does not check the format.
func Digest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
