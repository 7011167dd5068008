package h1

import (
	"bytes"
	"net/textproto"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"

	"trendgate/internal/transport/target"
)

// head is one request head the lane serves. Every string in it is a
// substring of a single copy of the head's bytes.
type head struct {
	method string  // GET or HEAD
	target string  // origin-form request-target, e.g. /a/b?c=d
	url    url.URL // target parsed
	host   string
	fields []field // in arrival order, Host excluded
	close  bool    // the client sent Connection: close
}

// field is one header field; name is in canonical form.
type field struct{ name, value string }

// verdict is parseHead's answer.
type verdict int

const (
	lane     verdict = iota // a complete head the lane serves
	needMore                // no end of head yet: read more bytes
	handOff                 // outside the lane's subset: net/http decides
)

// maxFields bounds the header fields of a head the lane serves; a head
// with more goes to net/http, which applies its own limits.
const maxFields = 64

// parseHead looks for one whole request head at the start of b. It returns
// lane and the head's length when the head is in the lane's subset,
// with its fields appended to fields[:0] (the caller's buffer, reused),
// needMore when b holds no end of head yet, and handOff for anything else.
//
// The subset is deliberately narrow, so that everything it accepts is read
// the same way by net/http (FuzzParseHead checks that against
// http.ReadRequest): request line "GET|HEAD SP /target SP HTTP/1.1" with a
// target of visible ASCII, CRLF line endings only, no leading empty line,
// field names and values valid by httpguts (the checks net/http itself
// uses), values without obs-fold, exactly one valid Host, and no
// Content-Length, Transfer-Encoding, Expect or Upgrade (no body, no
// protocol switch). Connection must be absent, "close" or "keep-alive".
// Field values lose leading and trailing spaces and tabs, as in net/http.
// The target must parse with url.ParseRequestURI, as net/http parses it
// (package target does it the same way),
// and "Pragma: no-cache" without Cache-Control implies
// "Cache-Control: no-cache", as net/http adds it.
func parseHead(b []byte, fields []field) (head, int, verdict) {
	// Find the empty line that ends the head, refusing bare LF on the way:
	// net/http accepts it, and scanning for CRLF CRLF alone would wait
	// forever for a head that used it.
	n, lines := 0, 0
	for {
		i := bytes.IndexByte(b[n:], '\n')
		if i < 0 {
			return head{}, 0, needMore
		}
		if i == 0 || b[n+i-1] != '\r' {
			return head{}, 0, handOff
		}
		n += i + 1
		if i == 1 { // "\r\n": the empty line
			if lines == 0 {
				return head{}, 0, handOff
			}
			break
		}
		if lines++; lines > maxFields+1 {
			return head{}, 0, handOff
		}
	}

	s := string(b[:n]) // the one copy every string of the request points into
	line, rest, _ := strings.Cut(s, "\r\n")
	var h head
	if !h.parseRequestLine(line) {
		return head{}, 0, handOff
	}
	h.fields = fields[:0]
	hostSeen := false
	for {
		line, rest, _ = strings.Cut(rest, "\r\n")
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || !httpguts.ValidHeaderFieldName(name) {
			return head{}, 0, handOff
		}
		value = trimSpaceTab(value)
		if !httpguts.ValidHeaderFieldValue(value) {
			return head{}, 0, handOff
		}
		name = textproto.CanonicalMIMEHeaderKey(name)
		switch name {
		case "Host":
			if hostSeen || !httpguts.ValidHostHeader(value) {
				return head{}, 0, handOff
			}
			h.host, hostSeen = value, true
			continue
		case "Content-Length", "Transfer-Encoding", "Expect", "Upgrade":
			return head{}, 0, handOff
		case "Connection":
			switch {
			case strings.EqualFold(value, "close"):
				h.close = true
			case strings.EqualFold(value, "keep-alive"):
			default:
				return head{}, 0, handOff
			}
		}
		h.fields = append(h.fields, field{name, value})
	}
	if !hostSeen {
		return head{}, 0, handOff
	}
	h.fixPragma()
	if target.Parse(&h.url, h.target) != nil {
		return head{}, 0, handOff
	}
	return h, n, lane
}

// fixPragma adds Cache-Control: no-cache when the first Pragma field is
// "no-cache" and no Cache-Control field came, as net/http's readRequest
// does (RFC 7234 section 5.4).
func (h *head) fixPragma() {
	pragma, cc := -1, false
	for i, f := range h.fields {
		switch f.name {
		case "Pragma":
			if pragma < 0 {
				pragma = i
			}
		case "Cache-Control":
			cc = true
		}
	}
	if pragma >= 0 && !cc && h.fields[pragma].value == "no-cache" {
		h.fields = append(h.fields, field{"Cache-Control", "no-cache"})
	}
}

// parseRequestLine fills method and target from "METHOD SP target SP
// HTTP/1.1" and reports whether the line is in the lane's subset.
func (h *head) parseRequestLine(line string) bool {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || proto != "HTTP/1.1" || (method != "GET" && method != "HEAD") {
		return false
	}
	if len(target) == 0 || target[0] != '/' {
		return false
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	h.method, h.target = method, target
	return true
}

// trimSpaceTab removes leading and trailing spaces and tabs.
func trimSpaceTab(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
