package h2_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"trendgate/internal/transport/h2"
)

// FuzzServeConn feeds arbitrary bytes, after the client preface, to a
// connection served by the lane and requires that it never panics, that
// the connection ends once the client hangs up, and that every handler it
// started has returned by then.
func FuzzServeConn(f *testing.F) {
	frames := func(write func(fr *http2.Framer, enc func(...string) []byte)) []byte {
		var out, hb bytes.Buffer
		fr := http2.NewFramer(&out, nil)
		fr.AllowIllegalWrites = true
		henc := hpack.NewEncoder(&hb)
		enc := func(kv ...string) []byte {
			hb.Reset()
			for i := 0; i+1 < len(kv); i += 2 {
				_ = henc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
			}
			return bytes.Clone(hb.Bytes())
		}
		write(fr, enc)
		return out.Bytes()
	}
	get := []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x"}
	// A SETTINGS frame and one GET.
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(get...), EndStream: true, EndHeaders: true})
	}))
	// A request that waits for its context, then a reset of it.
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":method", "GET", ":scheme", "https", ":path", "/wait"), EndStream: true, EndHeaders: true})
		_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: enc(":method", "GET", ":scheme", "https", ":path", "/big"), EndStream: true, EndHeaders: true})
		_ = fr.WriteWindowUpdate(3, 100)
	}))
	// A header block split over CONTINUATION, a body, PING, WINDOW_UPDATE.
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteSettings()
		b := enc(append(get, "x-a", "b")...)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:3]})
		_ = fr.WriteContinuation(1, true, b[3:])
		_ = fr.WriteData(1, false, []byte("body"))
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WriteWindowUpdate(0, 1000)
		_ = fr.WriteData(1, true, nil)
	}))
	// Settings out of range and a GOAWAY.
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1})
		_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	}))
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00\x04\x00\x00\x00\x00\x00garbage"))

	var started, finished atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		defer finished.Add(1)
		switch r.URL.Path {
		case "/wait":
			<-r.Context().Done() // until reset or the connection ends
		case "/big":
			_, _ = w.Write(make([]byte, 100000))
		default:
			_, _ = io.WriteString(w, "ok")
		}
	})
	srv := &h2.Server{Handler: h, Base: &http.Server{IdleTimeout: guard, WriteTimeout: guard}}
	f.Fuzz(func(t *testing.T, data []byte) {
		cli, sc := net.Pipe()
		served := make(chan struct{})
		go func() {
			defer close(served)
			srv.ServeConn(sc)
		}()
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			_, _ = io.Copy(io.Discard, cli)
		}()
		_ = cli.SetWriteDeadline(time.Now().Add(guard))
		if _, err := io.WriteString(cli, http2.ClientPreface); err == nil {
			_, _ = cli.Write(data)
		}
		_ = cli.Close()
		select {
		case <-served:
		case <-time.After(guard):
			t.Fatal("ServeConn did not return after the client hung up")
		}
		<-drained
		if s, f := started.Load(), finished.Load(); s != f {
			t.Fatalf("%d handlers started, %d returned", s, f)
		}
	})
}
