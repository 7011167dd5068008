package main

// The lean generator: an open-loop load generator that spends less CPU per
// request than vegeta's library does over Go's HTTP client (which builds a
// request and a response object per request): 25-245 µs against 80-380 on
// the development host, the most at the lowest rates. On a 2-CPU host the
// generator shares the servers' CPUs, so what it spends shows up as the
// servers' run-queue waits and in the tail they are measured by.
//
// It keeps conns connections per server open between steps. HTTP/1.1
// connections take the next due request when idle (a request that finds
// them all busy waits, and its wait counts); HTTP/2 requests go round-robin
// over the connections as streams, as the vegeta client does. A request's
// latency runs from the moment the dispatcher let it go to the last byte of
// its body. Each request is one prepared write: the HTTP/1.1 request's
// bytes, or one HEADERS frame whose block is coded once (literals never
// indexed, so it does not depend on the connection's HPACK state).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// leanClient is the lean generator's connections to one server for one
// protocol and its prepared request.
type leanClient struct {
	pr    protocol
	addr  string // host:port
	tls   *tls.Config
	conns int

	mu   sync.Mutex
	h1s  []*h1Conn // idle HTTP/1.1 connections, reused by later steps
	h2s  []*h2Conn
	h1rq []byte // the HTTP/1.1 request
	h2rq []byte // the HTTP/2 request's header block
}

func newLeanClient(pr protocol, rawURL, key string, conns int, tlsConf *tls.Config) (*leanClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	c := &leanClient{pr: pr, addr: u.Host, conns: conns}
	if pr != h1 {
		c.tls = tlsConf.Clone()
		c.tls.ServerName = u.Hostname()
		c.tls.NextProtos = []string{"http/1.1"}
		if pr == h2 {
			c.tls.NextProtos = []string{"h2"}
		}
	}
	path := u.RequestURI()
	c.h1rq = []byte("GET " + path + " HTTP/1.1\r\nHost: " + u.Host + "\r\nAuthorization: Bearer " + key + "\r\n\r\n")
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", u.Host}, {":path", path}, {"authorization", "Bearer " + key}} {
		// Sensitive: never added to the dynamic table, so the same block
		// is valid in any request on any connection.
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true}); err != nil {
			return nil, err
		}
	}
	c.h2rq = block.Bytes()
	return c, nil
}

// close closes the client's connections.
func (c *leanClient) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, hc := range c.h1s {
		hc.conn.Close()
	}
	for _, hc := range c.h2s {
		hc.conn.Close()
	}
	c.h1s, c.h2s = nil, nil
}

func (c *leanClient) dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil || c.tls == nil {
		return conn, err
	}
	tc := tls.Client(conn, c.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	if got := tc.ConnectionState().NegotiatedProtocol; c.pr == h2 && got != "h2" {
		tc.Close()
		return nil, fmt.Errorf("%s: the server did not agree to h2 (ALPN %q)", c.addr, got)
	}
	return tc, nil
}

// sample is one request's outcome.
type sample struct {
	latency time.Duration
	err     error
}

// leanStep sends requests at rate for d over c's connections and measures
// them as step does with vegeta.
func leanStep(ctx context.Context, c *leanClient, rate int, d time.Duration, cpu *cpuMeter) (result, error) {
	n := max(1, int(float64(rate)*d.Seconds()))
	due := make(chan time.Time, n) // never full: the dispatcher does not wait for the connections
	samples := make(chan sample, n)
	var res result
	began := time.Now()
	var wg sync.WaitGroup
	stopConns, err := c.start(ctx, due, samples, &wg)
	if err != nil {
		return res, err
	}
	dispatch(ctx, due, rate, n)
	close(due)
	wg.Wait()
	stopConns()
	close(samples)
	res.elapsed = time.Since(began)
	if err := res.stopCPU(cpu); err != nil {
		return res, err
	}
	lat := make([]time.Duration, 0, n)
	for s := range samples {
		if s.err != nil {
			res.errors++
			if res.firstError == "" {
				res.firstError = s.err.Error()
			}
		}
		lat = append(lat, s.latency)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.rate, res.requests = rate, uint64(len(lat))
	res.p50, res.p90, res.p99, res.mx = quantiles(lat)
	return res, nil
}

// quantiles returns the 50th, 90th and 99th percentiles and the maximum of
// lat (nearest rank), sorting it.
func quantiles(lat []time.Duration) (p50, p90, p99, mx time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(lat))+0.5) - 1
		return lat[min(max(i, 0), len(lat)-1)]
	}
	return at(0.50), at(0.90), at(0.99), lat[len(lat)-1]
}

// dispatch lets n requests go at rate, each stamped with the moment it
// went: after a late wake-up the requests due by then go at once, as a
// timer-driven generator's do.
func dispatch(ctx context.Context, due chan<- time.Time, rate, n int) {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	wake := time.NewTimer(0)
	defer wake.Stop()
	for i := 0; i < n; {
		now := time.Now()
		for ; i < n && now.Sub(start) >= time.Duration(i)*interval; i++ {
			due <- now
		}
		if i == n {
			return
		}
		wake.Reset(time.Until(start.Add(time.Duration(i) * interval)))
		select {
		case <-ctx.Done():
			return
		case <-wake.C:
		}
	}
}

// start makes sure c has its connections and starts their loops over due;
// stop (after wg is done) takes back the ones still good.
func (c *leanClient) start(ctx context.Context, due <-chan time.Time, samples chan<- sample, wg *sync.WaitGroup) (stop func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pr == h2 {
		return c.startH2(ctx, due, samples, wg)
	}
	for len(c.h1s) < c.conns {
		conn, err := c.dial(ctx)
		if err != nil {
			return nil, err
		}
		c.h1s = append(c.h1s, &h1Conn{conn: conn, br: bufio.NewReaderSize(conn, 64<<10)})
	}
	conns := c.h1s
	c.h1s = nil
	var kept []*h1Conn
	var keptMu sync.Mutex
	for _, hc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if hc.serve(ctx, c, due, samples) {
				keptMu.Lock()
				kept = append(kept, hc)
				keptMu.Unlock()
			}
		}()
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.h1s = append(c.h1s, kept...)
	}, nil
}

// h1Conn is one HTTP/1.1 connection of the lean generator.
type h1Conn struct {
	conn net.Conn
	br   *bufio.Reader
}

// serve sends a request for each due time it takes until due closes; it
// reports whether the connection is still good. A broken connection is
// redialled, each request it failed counted as an error.
func (hc *h1Conn) serve(ctx context.Context, c *leanClient, due <-chan time.Time, samples chan<- sample) bool {
	good := true
	for at := range due {
		if !good {
			conn, err := c.dial(ctx)
			if err != nil {
				samples <- sample{time.Since(at), err}
				continue
			}
			hc.conn, hc.br, good = conn, bufio.NewReaderSize(conn, 64<<10), true
		}
		err := hc.roundTrip(c.h1rq)
		samples <- sample{time.Since(at), err}
		var status statusError
		if err != nil && !errors.As(err, &status) { // a whole answer of another status leaves the connection good
			hc.conn.Close()
			good = false
		}
	}
	return good
}

// roundTrip writes req and reads one response, which must be a 200 with a
// Content-Length, whose body it discards.
func (hc *h1Conn) roundTrip(req []byte) error {
	hc.conn.SetDeadline(time.Now().Add(requestTimeout))
	if _, err := hc.conn.Write(req); err != nil {
		return err
	}
	line, err := hc.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	status := !bytes.HasPrefix(line, []byte("HTTP/1.1 200 "))
	var statusLine string
	if status {
		statusLine = string(bytes.TrimSpace(line))
	}
	length := -1
	for {
		line, err := hc.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 { // the blank line ending the head
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && len(name) == len("content-length") && bytes.EqualFold(name, []byte("content-length")) {
			if length, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil {
				return fmt.Errorf("content-length %q", bytes.TrimSpace(value))
			}
		}
	}
	if length < 0 {
		return errors.New("a response without Content-Length")
	}
	if _, err := hc.br.Discard(length); err != nil {
		return err
	}
	if status {
		return statusError(statusLine)
	}
	return nil
}

// statusError is a whole answer whose status is not 200.
type statusError string

func (e statusError) Error() string { return "status: " + string(e) }

// The HTTP/2 part.

// h2Window is the receive window the lean generator gives every stream and
// adds to the connection's: large enough that only the connection's needs
// topping up.
const h2Window = 1 << 30

// requestTimeout bounds a request's wait for its answer, as the vegeta
// client's timeout does; for HTTP/2 it is counted from the step's last
// request.
const requestTimeout = 10 * time.Second

// h2Conn is one HTTP/2 connection of the lean generator: requests are
// written by the step's loop, responses read by a reader of their own.
type h2Conn struct {
	conn      net.Conn
	bw        *bufio.Writer
	fr        *http2.Framer
	wmu       sync.Mutex // bw and the framer's writing side
	slots     chan struct{}
	nextID    uint32
	broken    error // set by the reader; guarded by pmu
	pmu       sync.Mutex
	pending   map[uint32]*h2Stream
	readerEnd chan struct{}
	unacked   uint32 // DATA bytes received since the last WINDOW_UPDATE (reader only)
}

type h2Stream struct {
	at      time.Time
	status  string
	samples chan<- sample
}

// dialH2 opens a connection, sends the preface and settings and waits for
// the server's settings, whose concurrent-stream limit it keeps to.
func (c *leanClient) dialH2(ctx context.Context) (*h2Conn, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	hc := &h2Conn{conn: conn, bw: bufio.NewWriterSize(conn, 16<<10), nextID: 1,
		pending: map[uint32]*h2Stream{}, readerEnd: make(chan struct{})}
	hc.fr = http2.NewFramer(hc.bw, bufio.NewReaderSize(conn, 64<<10))
	hc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	hc.fr.MaxHeaderListSize = 1 << 20
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fail := func(err error) (*h2Conn, error) { conn.Close(); return nil, err }
	if _, err := hc.bw.WriteString(http2.ClientPreface); err != nil {
		return fail(err)
	}
	if err := hc.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2Window}); err != nil {
		return fail(err)
	}
	if err := hc.fr.WriteWindowUpdate(0, h2Window); err != nil {
		return fail(err)
	}
	if err := hc.bw.Flush(); err != nil {
		return fail(err)
	}
	limit := uint32(1000)
	for {
		f, err := hc.fr.ReadFrame()
		if err != nil {
			return fail(err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); ok {
			limit = min(limit, v)
		}
		if err := hc.fr.WriteSettingsAck(); err != nil {
			return fail(err)
		}
		if err := hc.bw.Flush(); err != nil {
			return fail(err)
		}
		break
	}
	conn.SetDeadline(time.Time{})
	hc.slots = make(chan struct{}, max(1, limit))
	go hc.read()
	return hc, nil
}

// startH2 runs one writer per connection over its share of due: requests
// go round-robin, so a request waits only for its own connection's
// stream limit.
func (c *leanClient) startH2(ctx context.Context, due <-chan time.Time, samples chan<- sample, wg *sync.WaitGroup) (func(), error) {
	for i, hc := range c.h2s { // drop what broke in the last step
		if hc.err() != nil {
			hc.conn.Close()
			c.h2s[i] = nil
		}
	}
	c.h2s = slices.DeleteFunc(c.h2s, func(hc *h2Conn) bool { return hc == nil })
	for len(c.h2s) < c.conns {
		hc, err := c.dialH2(ctx)
		if err != nil {
			return nil, err
		}
		c.h2s = append(c.h2s, hc)
	}
	lanes := make([]chan time.Time, len(c.h2s))
	for i, hc := range c.h2s {
		lanes[i] = make(chan time.Time, cap(due)/len(lanes)+1) // its share of due: never full
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc.serve(ctx, c.h2rq, lanes[i], samples)
		}()
	}
	wg.Add(1)
	go func() { // deal due times round-robin
		defer wg.Done()
		i := 0
		for at := range due {
			lanes[i] <- at
			i = (i + 1) % len(lanes)
		}
		for _, l := range lanes {
			close(l)
		}
	}()
	return func() {}, nil
}

func (hc *h2Conn) err() error {
	hc.pmu.Lock()
	defer hc.pmu.Unlock()
	return hc.broken
}

// serve writes a request for each due time and returns when due is closed
// and every stream it opened has ended (or the connection broke).
func (hc *h2Conn) serve(ctx context.Context, block []byte, due <-chan time.Time, samples chan<- sample) {
	for at := range due {
		select {
		case hc.slots <- struct{}{}:
		case <-hc.readerEnd:
			samples <- sample{time.Since(at), hc.err()}
			continue
		case <-ctx.Done():
			samples <- sample{time.Since(at), ctx.Err()}
			continue
		}
		hc.pmu.Lock()
		if hc.broken != nil {
			hc.pmu.Unlock()
			<-hc.slots
			samples <- sample{time.Since(at), hc.broken}
			continue
		}
		id := hc.nextID
		hc.nextID += 2
		hc.pending[id] = &h2Stream{at: at, samples: samples}
		hc.pmu.Unlock()
		hc.wmu.Lock()
		err := hc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true})
		if err == nil {
			err = hc.bw.Flush()
		}
		hc.wmu.Unlock()
		if err != nil {
			hc.fail(err)
		}
	}
	// Wait for the streams still open: every slot back. A stream not
	// answered in requestTimeout fails the connection (and with it the stream).
	timeout := time.NewTimer(requestTimeout)
	defer timeout.Stop()
	for range cap(hc.slots) {
		select {
		case hc.slots <- struct{}{}:
		case <-hc.readerEnd:
			return
		case <-ctx.Done():
			hc.fail(ctx.Err())
			return
		case <-timeout.C:
			hc.fail(errors.New("no answer in " + requestTimeout.String()))
			return
		}
	}
	for range cap(hc.slots) {
		<-hc.slots
	}
}

// fail marks the connection broken and ends every open stream with err.
func (hc *h2Conn) fail(err error) {
	hc.pmu.Lock()
	defer hc.pmu.Unlock()
	if hc.broken == nil {
		hc.broken = err
		hc.conn.Close()
	}
	for id, st := range hc.pending {
		delete(hc.pending, id)
		st.samples <- sample{time.Since(st.at), err}
		<-hc.slots
	}
}

// end ends stream id, with err if it failed.
func (hc *h2Conn) end(id uint32, err error) {
	hc.pmu.Lock()
	st := hc.pending[id]
	delete(hc.pending, id)
	hc.pmu.Unlock()
	if st == nil {
		return
	}
	if err == nil && st.status != "200" {
		err = errors.New("status " + st.status)
	}
	st.samples <- sample{time.Since(st.at), err}
	<-hc.slots
}

// read reads frames until the connection ends: it ends streams, answers
// settings and pings, and tops up the connection's receive window.
func (hc *h2Conn) read() {
	defer close(hc.readerEnd)
	for {
		f, err := hc.fr.ReadFrame()
		if err != nil {
			hc.fail(err)
			return
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			hc.pmu.Lock()
			if st := hc.pending[f.StreamID]; st != nil && st.status == "" {
				st.status = f.PseudoValue("status")
			}
			hc.pmu.Unlock()
			if f.StreamEnded() {
				hc.end(f.StreamID, nil)
			}
		case *http2.DataFrame:
			hc.unacked += uint32(len(f.Data()))
			if f.StreamEnded() {
				hc.end(f.StreamID, nil)
			}
			if hc.unacked >= h2Window/2 {
				if err := hc.write(func() error { return hc.fr.WriteWindowUpdate(0, hc.unacked) }); err != nil {
					hc.fail(err)
					return
				}
				hc.unacked = 0
			}
		case *http2.RSTStreamFrame:
			hc.end(f.StreamID, fmt.Errorf("stream reset: %v", f.ErrCode))
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := hc.write(hc.fr.WriteSettingsAck); err != nil {
					hc.fail(err)
					return
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := hc.write(func() error { return hc.fr.WritePing(true, f.Data) }); err != nil {
					hc.fail(err)
					return
				}
			}
		case *http2.GoAwayFrame:
			hc.fail(fmt.Errorf("GOAWAY %v", f.ErrCode))
			return
		}
	}
}

func (hc *h2Conn) write(frame func() error) error {
	hc.wmu.Lock()
	defer hc.wmu.Unlock()
	if err := frame(); err != nil {
		return err
	}
	return hc.bw.Flush()
}
