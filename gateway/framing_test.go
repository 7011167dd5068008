package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// TestFramingErrorClosesConnection: a request that frames a body (the API
// takes none) is answered 400 and the connection is closed after the
// answer, on the lean HTTP/1.1 lane and on net/http alike, so that bytes
// after it can never be read as another request (RFC 9112 §6.3).
func TestFramingErrorClosesConnection(t *testing.T) {
	for _, fast := range []bool{true, false} {
		h := gatewaytest.New(t, func(c *config.Config) { c.Server.FastHTTP1 = &fast })
		addr := strings.TrimPrefix(h.Base, "http://")
		for name, head := range map[string]string{
			"content-length and chunked": "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			"chunked":                    "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			"content-length":             "Content-Length: 3\r\n\r\nabc",
		} {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second)) // a bound on a broken server, not a wait
			smuggled := "GET /api4/public/topics/list/v1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + h.Full + "\r\n\r\n"
			if _, err := io.WriteString(conn, "GET /api4/public/topics/list/v1 HTTP/1.1\r\nHost: x\r\n"+head+smuggled); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("fast=%v %s: %v", fast, name, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !resp.Close {
				t.Errorf("fast=%v %s: %d, Connection %q; want 400 and close", fast, name, resp.StatusCode, resp.Header.Get("Connection"))
			}
			if extra, err := br.ReadString('\n'); err != io.EOF {
				t.Errorf("fast=%v %s: after the 400 the connection gave %q, %v; want EOF (the smuggled request unanswered)", fast, name, extra, err)
			}
			conn.Close()
		}
	}
}

// TestOptionsStar: "OPTIONS *" is answered like any method the API does not
// allow, with X-Request-Id and the JSON error, on both HTTP/1.1 lanes.
func TestOptionsStar(t *testing.T) {
	for _, fast := range []bool{true, false} {
		h := gatewaytest.New(t, func(c *config.Config) { c.Server.FastHTTP1 = &fast })
		conn, err := net.Dial("tcp", strings.TrimPrefix(h.Base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second)) // a bound on a broken server, not a wait
		if _, err := io.WriteString(conn, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		id := resp.Header.Get("X-Request-Id")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" || id == "" ||
			!strings.Contains(string(body), `"code":"method_not_allowed"`) || !strings.Contains(string(body), id) {
			t.Errorf("fast=%v: %d Allow %q X-Request-Id %q %s; want 405 JSON method_not_allowed with the request id",
				fast, resp.StatusCode, resp.Header.Get("Allow"), id, body)
		}
	}
}
