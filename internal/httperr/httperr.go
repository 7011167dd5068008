// Package httperr defines the gateway's client-facing error and the one
// function that writes it. Every error body trendgate produces is
//
//	{"error": "<message for humans>", "code": "<stable_code>", "request_id": "<id>"}
//
// Internal error text never reaches a client: only the Message of an *Error
// is written, and callers build those messages for clients on purpose.
package httperr

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Error is a client-facing failure: an HTTP status, a stable machine code and
// a human message. RetryAfter, when positive, becomes a Retry-After header
// (whole seconds, rounded up).
type Error struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

// Error implements error; it returns the code and message.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// New returns an *Error with the given status, code and message.
func New(status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message}
}

type body struct {
	Error     string `json:"error"`
	Code      string `json:"code"`
	RequestID string `json:"request_id"`
}

// Write writes e as the JSON error body with its status. It sets
// Content-Type, Cache-Control: no-store and, when e.RetryAfter > 0,
// Retry-After. It must be the only code that writes error bodies.
func Write(w http.ResponseWriter, requestID string, e *Error) {
	// No HTML escaping: a message that says <key> reads "<key>", not
	// "\u003ckey\u003e". The body is application/json with nosniff, never
	// HTML, so the escaping protects nothing.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(body{Error: e.Message, Code: e.Code, RequestID: requestID}); err != nil {
		buf.Reset() // cannot happen for strings; keep the contract anyway
		buf.WriteString(`{"error":"internal error","code":"internal","request_id":""}` + "\n")
	}
	b := buf.Bytes() // Encode ends it with a newline
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(RetryAfterSeconds(e.RetryAfter), 10))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(b)
}

// RetryAfterSeconds rounds d up to whole seconds, at least 1.
func RetryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}
