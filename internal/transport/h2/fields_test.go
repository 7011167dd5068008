package h2_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// fieldsWriter is the lane's addition to http.ResponseWriter.
type fieldsWriter interface {
	WriteHeaderFields(code int, fields []byte, contentLength int64)
}

// TestWriteHeaderFields: a head written with WriteHeaderFields reaches the
// client with the block's fields (names in lower case), the header map's,
// Content-Length and Date, on one connection whose HPACK table the map's
// fields keep changing: the same block again (its coding reused), another
// block of the same length, a value longer than one prefix byte can say,
// one that Huffman coding would lengthen, HEAD, and a body larger than the
// lane holds back.
func TestWriteHeaderFields(t *testing.T) {
	a := []byte("Cache-Status: trendgate; hit; ttl=60\r\nEtag: \"abc\"\r\n" +
		"Content-Type: application/json; charset=utf-8\r\nX-Long: " + strings.Repeat("v", 300) + "\r\n")
	b := bytes.Replace(bytes.Clone(a), []byte(`"abc"`), []byte(`"xyz"`), 1) // same length, another slice
	odd := []byte("X-Odd: ~|{}^`~|{}^`\r\nContent-Type: text/plain\r\n")
	blocks := map[string][]byte{"a": a, "b": b, "odd": odd}
	big := bytes.Repeat([]byte("x"), 70000)
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := []byte("body of " + r.URL.Path)
		if r.URL.Query().Has("big") {
			body = big
		}
		// A new value every time: the map's fields go into the dynamic table.
		w.Header()["X-Request-Id"] = []string{"req-" + strconv.FormatInt(n.Add(1), 10)}
		w.(fieldsWriter).WriteHeaderFields(http.StatusOK, blocks[strings.TrimPrefix(r.URL.Path, "/")], int64(len(body)))
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	})
	c := handshake(t, startLane(t, h, nil))
	id := uint32(1)
	for i, step := range []struct{ method, path string }{
		{"GET", "/a"}, {"GET", "/a"}, {"GET", "/b"}, {"GET", "/a"}, {"GET", "/odd"},
		{"HEAD", "/a"}, {"GET", "/a?big"}, {"GET", "/b"},
	} {
		c.request(id, step.method, step.path, true)
		got := c.response(id)
		id += 2
		name, _, _ := strings.Cut(strings.TrimPrefix(step.path, "/"), "?")
		body := []byte("body of /" + name)
		if strings.HasSuffix(step.path, "?big") {
			body = big
		}
		want := map[string]string{
			":status":        "200",
			"x-request-id":   "req-" + strconv.Itoa(i+1),
			"content-length": strconv.Itoa(len(body)),
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(blocks[name]), "\r\n"), "\r\n") {
			k, v, _ := strings.Cut(line, ": ")
			want[strings.ToLower(k)] = v
		}
		if got.header["date"] == "" {
			t.Errorf("step %d %s %s: no date", i, step.method, step.path)
		}
		delete(got.header, "date")
		if fmt.Sprint(got.header) != fmt.Sprint(want) {
			t.Errorf("step %d %s %s: fields\n%v\nwant\n%v", i, step.method, step.path, got.header, want)
		}
		if step.method == "HEAD" {
			body = nil
		}
		if !bytes.Equal(got.body, body) {
			t.Errorf("step %d %s %s: a body of %d bytes; want %d", i, step.method, step.path, len(got.body), len(body))
		}
	}
}

// TestWriteHeaderFieldsRefusesWhatItCannotFrame: a status without a body
// or a negative length panics, as on the HTTP/1.1 lane; a call after the
// head was written is ignored.
func TestWriteHeaderFieldsRefusesWhatItCannotFrame(t *testing.T) {
	panics := make(chan string, 8)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fw := w.(fieldsWriter)
		for _, call := range []struct {
			code int
			n    int64
		}{{http.StatusNotModified, 0}, {http.StatusNoContent, 0}, {http.StatusOK, -1}, {http.StatusContinue, 0}} {
			func() {
				defer func() {
					if recover() == nil {
						panics <- fmt.Sprintf("WriteHeaderFields(%d, _, %d) did not panic", call.code, call.n)
					}
				}()
				fw.WriteHeaderFields(call.code, []byte("X-A: b\r\n"), call.n)
			}()
		}
		w.Header()["Content-Type"] = []string{"text/plain"}
		w.WriteHeader(http.StatusAccepted)
		fw.WriteHeaderFields(http.StatusOK, []byte("X-A: b\r\n"), 99)
		_, _ = w.Write([]byte("ok"))
		close(panics)
	})
	c := handshake(t, startLane(t, h, nil))
	c.request(1, "GET", "/", true)
	got := c.response(1)
	for p := range panics {
		t.Error(p)
	}
	if got.status != http.StatusAccepted || got.header["x-a"] != "" || string(got.body) != "ok" || got.header["content-length"] != "2" {
		t.Errorf("after WriteHeader, WriteHeaderFields changed the answer: %d %v %q", got.status, got.header, got.body)
	}
}
