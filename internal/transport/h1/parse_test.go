package h1

import (
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// laneCase is a head parseHead must serve, with what it must read from it.
type laneCase struct {
	name   string
	in     string // the head, possibly followed by bytes of what comes next
	n      int    // the head's length; 0 means all of in
	method string
	target string
	host   string
	fields []field
	close  bool
}

var laneCases = []laneCase{
	{name: "minimal", in: "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		method: "GET", target: "/", host: "x"},
	{name: "API request with query and escaped path",
		in: "GET /api4/public/topic/%23ai/time-series/v1?bucket=day&x=%2F HTTP/1.1\r\n" +
			"Host: gw.example:8080\r\nAuthorization: Bearer tg_x\r\nAccept-Encoding: gzip\r\n\r\n",
		method: "GET", target: "/api4/public/topic/%23ai/time-series/v1?bucket=day&x=%2F", host: "gw.example:8080",
		fields: []field{{"Authorization", "Bearer tg_x"}, {"Accept-Encoding", "gzip"}}},
	{name: "HEAD, canonical names, trimmed values, Connection close",
		in:     "HEAD /x HTTP/1.1\r\nhost:x \r\naccept-encoding: \t gzip\t \r\nx-multi-word-name:a  b\r\nconnection: Close\r\n\r\n",
		method: "HEAD", target: "/x", host: "x",
		fields: []field{{"Accept-Encoding", "gzip"}, {"X-Multi-Word-Name", "a  b"}, {"Connection", "Close"}}, close: true},
	{name: "Connection CLOSE upper case", in: "GET / HTTP/1.1\r\nHost: x\r\nConnection: CLOSE\r\n\r\n",
		method: "GET", target: "/", host: "x", fields: []field{{"Connection", "CLOSE"}}, close: true},
	{name: "Connection keep-alive", in: "GET / HTTP/1.1\r\nHost: x\r\nConnection: Keep-Alive\r\n\r\n",
		method: "GET", target: "/", host: "x", fields: []field{{"Connection", "Keep-Alive"}}},
	{name: "duplicate names keep arrival order", in: "GET / HTTP/1.1\r\nX-A: 1\r\nHost: x\r\nx-a: 2\r\nX-B: 3\r\nX-A: 4\r\n\r\n",
		method: "GET", target: "/", host: "x", fields: []field{{"X-A", "1"}, {"X-A", "2"}, {"X-B", "3"}, {"X-A", "4"}}},
	{name: "empty value", in: "GET / HTTP/1.1\r\nHost: x\r\nA:\r\nB: \t\r\n\r\n",
		method: "GET", target: "/", host: "x", fields: []field{{"A", ""}, {"B", ""}}},
	{name: "obs-text in a value", in: "GET / HTTP/1.1\r\nHost: x\r\nA: \x80caf\xc3\xa9\xff\r\n\r\n",
		method: "GET", target: "/", host: "x", fields: []field{{"A", "\x80caf\xc3\xa9\xff"}}},
	{name: "token characters in a name", in: "GET / HTTP/1.1\r\nHost: x\r\nX-!#$%&'*+.^_`|~9: v\r\n\r\n",
		method: "GET", target: "/", host: "x", fields: []field{{"X-!#$%&'*+.^_`|~9", "v"}}},
	{name: "IPv6 host and raw '#' in target", in: "GET /a#b HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
		method: "GET", target: "/a#b", host: "[::1]:80"},
	{name: "empty Host", in: "GET / HTTP/1.1\r\nHost:\r\n\r\n",
		method: "GET", target: "/", host: ""},
	{name: "double slash target", in: "GET //x/y?z HTTP/1.1\r\nHost: x\r\n\r\n",
		method: "GET", target: "//x/y?z", host: "x"},
	{name: "pipelined next request is not consumed", in: "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n",
		n: len("GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"), method: "GET", target: "/1", host: "x"},
	{name: "partial next request is not consumed", in: "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /2 HTTP/1.1\r\nContent-Le",
		n: len("GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"), method: "GET", target: "/1", host: "x"},
	// net/http turns Pragma: no-cache without Cache-Control into
	// Cache-Control: no-cache too (fixPragmaCacheControl); so does the lane.
	{name: "Pragma no-cache", in: "GET / HTTP/1.1\r\nHost: x\r\nPragma: no-cache\r\n\r\n",
		method: "GET", target: "/", host: "x", fields: []field{{"Pragma", "no-cache"}, {"Cache-Control", "no-cache"}}},
	{name: "maxFields fields", in: "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("A: b\r\n", maxFields-1) + "\r\n",
		method: "GET", target: "/", host: "x", fields: slices.Repeat([]field{{"A", "b"}}, maxFields-1)},
}

func TestParseHeadLane(t *testing.T) {
	for _, tc := range laneCases {
		t.Run(tc.name, func(t *testing.T) {
			h, n, v := parseHead([]byte(tc.in), nil)
			if v != lane {
				t.Fatalf("got verdict %d; want lane (%d)", v, lane)
			}
			wantN := tc.n
			if wantN == 0 {
				wantN = len(tc.in)
			}
			if n != wantN {
				t.Errorf("got n %d; want %d", n, wantN)
			}
			if h.method != tc.method || h.target != tc.target || h.host != tc.host || h.close != tc.close {
				t.Errorf("got %q %q host %q close %v; want %q %q host %q close %v",
					h.method, h.target, h.host, h.close, tc.method, tc.target, tc.host, tc.close)
			}
			if !slices.Equal(h.fields, tc.fields) {
				t.Errorf("got fields %q; want %q", h.fields, tc.fields)
			}
			wantURL, err := url.ParseRequestURI(tc.target)
			if err != nil {
				t.Fatalf("bad test case: %v", err)
			}
			if !reflect.DeepEqual(&h.url, wantURL) {
				t.Errorf("got url %#v; want %#v", h.url, wantURL)
			}
		})
	}
}

// TestParseHeadPrefixes: no strict prefix of a head the lane serves is a
// head, so each one asks for more bytes (never hands the connection off).
func TestParseHeadPrefixes(t *testing.T) {
	for _, tc := range laneCases {
		t.Run(tc.name, func(t *testing.T) {
			end := tc.n
			if end == 0 {
				end = len(tc.in)
			}
			for i := range end {
				if _, _, v := parseHead([]byte(tc.in[:i]), nil); v != needMore {
					t.Fatalf("prefix %q: got verdict %d; want needMore (%d)", tc.in[:i], v, needMore)
				}
			}
		})
	}
}

func TestParseHeadNeedMore(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"empty", ""},
		{"method only", "GET"},
		{"request line without end", "GET / HTTP/1.1"},
		{"request line only", "GET / HTTP/1.1\r\n"},
		{"fields without empty line", "GET / HTTP/1.1\r\nHost: x\r\n"},
		{"CR of the empty line", "GET / HTTP/1.1\r\nHost: x\r\n\r"},
		{"outside the subset but incomplete", "POST / HTTP/1.1\r\nContent-Length: 5\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, n, v := parseHead([]byte(tc.in), nil); v != needMore || n != 0 {
				t.Errorf("got verdict %d n %d; want needMore (%d) n 0", v, n, needMore)
			}
		})
	}
}

func TestParseHeadHandOff(t *testing.T) {
	const ok = "GET / HTTP/1.1\r\nHost: x\r\n" // a valid start that fields can follow
	for _, tc := range []struct{ name, in string }{
		// Request line.
		{"POST", "POST / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"PUT", "PUT / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"OPTIONS", "OPTIONS / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"lower-case get", "get / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: x\r\n\r\n"},
		{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: x\r\n\r\n"},
		{"HTTP/1.10", "GET / HTTP/1.10\r\nHost: x\r\n\r\n"},
		{"lower-case http/1.1", "GET / http/1.1\r\nHost: x\r\n\r\n"},
		{"HTTP/1.1 with trailing space", "GET / HTTP/1.1 \r\nHost: x\r\n\r\n"},
		{"HTTP/1.1 with trailing tab", "GET / HTTP/1.1\t\r\nHost: x\r\n\r\n"},
		{"HTTP/1.1 then more words", "GET / HTTP/1.1 x\r\nHost: x\r\n\r\n"},
		{"no protocol", "GET /\r\nHost: x\r\n\r\n"},
		{"two spaces after method", "GET  / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"two spaces before protocol", "GET /  HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"empty target", "GET  HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"absolute-form target", "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"authority-form target", "GET x:80 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"asterisk target", "GET * HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"UTF-8 in target", "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"0x80 in target", "GET /\x80 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"0xff in target", "GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"DEL in target", "GET /\x7f HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"NUL in target", "GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"tab in target", "GET /a\tb HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"CR in target", "GET /a\rb HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"bad escape in target", "GET /%0 HTTP/1.1\r\nHost: x\r\n\r\n"},    // found by FuzzParseHead
		{"bad escape in target 2", "GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n"}, // url.ParseRequestURI fails
		// Line endings.
		{"bare LF everywhere", "GET / HTTP/1.1\nHost: x\n\n"},
		{"bare LF after request line", "GET / HTTP/1.1\nHost: x\r\n\r\n"},
		{"bare LF after a field", ok + "A: b\n\r\n"},
		{"bare LF as the empty line", ok + "\n"},
		{"line of a lone CR", ok + "A: b\r\n\r\r\n\r\n"},
		{"leading empty line", "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"leading bare LF", "\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"CR inside a field line", ok + "A: b\rc\r\n\r\n"},
		// Field lines.
		{"obs-fold with space", ok + "A: b\r\n c\r\n\r\n"},
		{"obs-fold with tab", ok + "A: b\r\n\tc\r\n\r\n"},
		{"first field line folded", "GET / HTTP/1.1\r\n Host: x\r\n\r\n"},
		{"space before colon", ok + "A : b\r\n\r\n"},
		{"tab before colon", ok + "A\t: b\r\n\r\n"},
		{"no colon", ok + "A b\r\n\r\n"},
		{"empty name", ok + ": b\r\n\r\n"},
		{"'(' in name", ok + "A(b): c\r\n\r\n"},
		{"'@' in name", ok + "A@b: c\r\n\r\n"},
		{"non-ASCII name", ok + "\xc3\x84: c\r\n\r\n"},
		{"NUL in value", ok + "A: b\x00c\r\n\r\n"},
		{"control byte in value", ok + "A: b\x01\r\n\r\n"},
		{"DEL in value", ok + "A: b\x7f\r\n\r\n"},
		{"escape in value", ok + "A: \x1b[0m\r\n\r\n"},
		// Host.
		{"no Host", "GET / HTTP/1.1\r\nA: b\r\n\r\n"},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n"},
		{"two Hosts, same value, different case", "GET / HTTP/1.1\r\nHost: x\r\nhost: x\r\n\r\n"},
		{"Host with a space", "GET / HTTP/1.1\r\nHost: x y\r\n\r\n"},
		{"Host with a slash", "GET / HTTP/1.1\r\nHost: x/y\r\n\r\n"},
		{"Host with UTF-8", "GET / HTTP/1.1\r\nHost: caf\xc3\xa9\r\n\r\n"},
		// Bodies and protocol switches.
		{"Content-Length 0", ok + "Content-Length: 0\r\n\r\n"},
		{"content-length 5", ok + "content-length: 5\r\n\r\nhello"},
		{"Transfer-Encoding chunked", ok + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"Transfer-Encoding identity", ok + "Transfer-Encoding: identity\r\n\r\n"},
		{"Expect", ok + "Expect: 100-continue\r\n\r\n"},
		{"Upgrade", ok + "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"},
		{"Upgrade without Connection", ok + "Upgrade: h2c\r\n\r\n"},
		// Connection.
		{"Connection list with keep-alive", ok + "Connection: keep-alive, Upgrade\r\n\r\n"},
		{"Connection list with close", ok + "Connection: close, TE\r\n\r\n"},
		{"Connection close, keep-alive", ok + "Connection: close, keep-alive\r\n\r\n"},
		{"Connection other token", ok + "Connection: TE\r\n\r\n"},
		{"Connection empty", ok + "Connection:\r\n\r\n"},
		// Size.
		{"more than maxFields fields", ok + strings.Repeat("A: b\r\n", maxFields) + "\r\n"},
		{"more than maxFields lines, head not ended", ok + strings.Repeat("A: b\r\n", maxFields+5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, n, v := parseHead([]byte(tc.in), nil); v != handOff || n != 0 {
				t.Errorf("got verdict %d n %d; want handOff (%d) n 0", v, n, handOff)
			}
		})
	}
}

func TestTrimSpaceTab(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{" \t ", ""},
		{"a", "a"},
		{" \ta b\t ", "a b"},
		{"\ra\n", "\ra\n"}, // only spaces and tabs
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := trimSpaceTab(tc.in); got != tc.want {
				t.Errorf("got %q; want %q", got, tc.want)
			}
		})
	}
}
