package gatewaytest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/api"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/internal/clock"
	"trendgate/internal/testing/syncbuf"
	"trendgate/projection"
)

// This file holds the differential oracle's machinery (oracle_test.go
// drives it): the upstream's own answer to a client request at an instant,
// the comparison of a gateway answer with it, gateways that can be
// restarted from their snapshot, and the tally of the paths answers took.

// UpstreamRef answers a client request as the upstream would have at a
// given instant on the shared clock, through (*demo.Server).AnswerAt: no
// rate limits, faults or recording, the upstream's ClockOffset applied.
type UpstreamRef struct {
	Up *demo.Server
}

// AnswerAt is the upstream's status and body for GET target (a request
// the oracle already rewrote with upstreamTarget) at the shared clock's
// instant at.
func (u *UpstreamRef) AnswerAt(target string, at time.Time) (int, []byte) {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Header.Set("Authorization", "Bearer "+UpstreamKey)
	return u.Up.AnswerAt(r, at)
}

// UpstreamTarget is the request the oracle asks the upstream for a client
// request-target: the query exactly as the client sent it (that is where
// the readings of start and end differ), and the topic as docs/api.md
// ("Endpoints and parsing") says the client meant it: '+' a space, one
// percent-decoding, ASCII upper case folded, re-encoded by the fixed
// encoder. The spec has topics in lower case and the upstream does not
// fold case (a name in the wrong case returns empty data), so asking it for "BITCOIN" would compare the gateway's bitcoin
// with nobody's. This decoding is written here on purpose instead of
// calling the gateway's parser, so a bug there cannot hide itself.
func UpstreamTarget(target string) string {
	path, query, _ := strings.Cut(target, "?")
	fold := func(seg string) string {
		s, err := url.PathUnescape(strings.ReplaceAll(seg, "+", "%20"))
		if err != nil {
			return seg
		}
		return api.EncodeTopic(strings.ToLower(s))
	}
	segs := strings.Split(path, "/")
	switch {
	case len(segs) == 7 && segs[1] == "api4" && segs[3] == "topic":
		segs[4] = fold(segs[4])
	case len(segs) == 5 && segs[1] == "topic":
		segs[2] = fold(segs[2])
	}
	path = strings.Join(segs, "/")
	if query != "" {
		return path + "?" + query
	}
	return path
}

// SeriesBody is the part of a time-series answer the oracle compares.
type SeriesBody struct {
	Config struct {
		Topic  any `json:"topic"`
		Bucket any `json:"bucket"`
	} `json:"config"`
	Data []json.RawMessage `json:"data"`
}

// decodeJSON decodes b into a generic value with numbers kept exact.
func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, ea := decodeJSON(a)
	vb, eb := decodeJSON(b)
	return ea == nil && eb == nil && reflect.DeepEqual(va, vb)
}

// Verdict is the outcome of comparing one gateway body with the
// upstream's.
type Verdict struct {
	OK              bool
	GotRows, UpRows int    // data rows (series), items (list), lines (TSV)
	Detail          string // what differs, for the failure message
}

// CompareBodies compares the gateway's body got (decompressed) for
// endpoint ep with the upstream's body up, projected with proj first for
// a limited plan (nil: full).
//
//   - time series: the data rows, JSON-equal and in the same order, and
//     config.topic and config.bucket; the rest of config (the echoed
//     window, generated) is not compared.
//   - list and whatsup: the whole body, JSON-equal. config.generated is
//     compared too: the oracle asks the upstream at the very second the
//     gateway's data was fetched, so it is the same.
//   - TSV: the bytes.
func CompareBodies(ep api.Endpoint, proj *projection.Projection, got, up []byte) Verdict {
	if proj != nil && ep != api.EndpointTSV {
		p, err := proj.Apply(ep, up)
		if err != nil {
			return Verdict{Detail: "projecting the upstream's body: " + err.Error()}
		}
		up = p
	}
	switch ep {
	case api.EndpointSeries:
		var g, u SeriesBody
		if err := json.Unmarshal(got, &g); err != nil {
			return Verdict{Detail: "gateway body is not a series: " + err.Error()}
		}
		if err := json.Unmarshal(up, &u); err != nil {
			return Verdict{Detail: "upstream body is not a series: " + err.Error()}
		}
		v := Verdict{GotRows: len(g.Data), UpRows: len(u.Data)}
		if !reflect.DeepEqual(g.Config, u.Config) {
			v.Detail = fmt.Sprintf("config topic/bucket %v/%v; upstream %v/%v", g.Config.Topic, g.Config.Bucket, u.Config.Topic, u.Config.Bucket)
			return v
		}
		v.Detail = rowDiff(g.Data, u.Data)
		v.OK = v.Detail == ""
		return v
	case api.EndpointTSV:
		v := Verdict{GotRows: bytes.Count(got, []byte("\n")), UpRows: bytes.Count(up, []byte("\n"))}
		v.OK = bytes.Equal(got, up)
		if !v.OK {
			v.Detail = "TSV bodies differ"
		}
		return v
	default:
		var g, u struct {
			Data []json.RawMessage `json:"data"`
		}
		_ = json.Unmarshal(got, &g)
		_ = json.Unmarshal(up, &u)
		v := Verdict{GotRows: len(g.Data), UpRows: len(u.Data), OK: jsonEqual(got, up)}
		if !v.OK {
			v.Detail = "bodies are not JSON-equal"
		}
		return v
	}
}

// rowDiff describes how the row lists differ ("" when they are equal):
// the bucket times each side has that the other lacks, and the first row
// present on both sides whose fields differ.
func rowDiff(got, up []json.RawMessage) string {
	times := func(rows []json.RawMessage) []int64 {
		out := make([]int64, len(rows))
		for i, r := range rows {
			var v struct {
				Time int64 `json:"time"`
			}
			_ = json.Unmarshal(r, &v)
			out[i] = v.Time
		}
		return out
	}
	gt, ut := times(got), times(up)
	equal := len(got) == len(up)
	for i := 0; equal && i < len(got); i++ {
		equal = jsonEqual(got[i], up[i])
	}
	if equal {
		return ""
	}
	inU := make(map[int64]int, len(ut))
	for i, t := range ut {
		inU[t] = i
	}
	inG := make(map[int64]bool, len(gt))
	var extra, missing []string
	var changed string
	for i, t := range gt {
		inG[t] = true
		j, ok := inU[t]
		if !ok {
			extra = append(extra, hourLabel(t))
			continue
		}
		if changed == "" && !jsonEqual(got[i], up[j]) {
			changed = fmt.Sprintf("row %s differs: gateway %s; upstream %s", hourLabel(t), got[i], up[j])
		}
	}
	for _, t := range ut {
		if !inG[t] {
			missing = append(missing, hourLabel(t))
		}
	}
	var b strings.Builder
	if len(extra) > 0 {
		fmt.Fprintf(&b, "rows the upstream did not send: %s; ", capList(extra))
	}
	if len(missing) > 0 {
		fmt.Fprintf(&b, "rows the gateway left out: %s; ", capList(missing))
	}
	if changed != "" {
		b.WriteString(changed)
	}
	if b.Len() == 0 {
		b.WriteString("rows in another order")
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// hourLabel writes a bucket time as unix seconds and UTC.
func hourLabel(t int64) string {
	return fmt.Sprintf("%d (%s)", t, time.Unix(t, 0).UTC().Format("01-02 15:04"))
}

func capList(s []string) string {
	if len(s) > 6 {
		return strings.Join(s[:3], ", ") + fmt.Sprintf(" … (%d in all) … ", len(s)) + strings.Join(s[len(s)-2:], ", ")
	}
	return strings.Join(s, ", ")
}

// Gunzip returns body decompressed when enc is gzip.
func Gunzip(enc string, body []byte) ([]byte, error) {
	if enc != "gzip" {
		return body, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// Clip shortens a body for a failure message.
func Clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return fmt.Sprintf("%s … [%d bytes in all] … %s", b[:n*3/4], len(b), b[len(b)-n/4:])
}

// OracleNode is one gateway of the oracle, on random loopback ports, that
// can be stopped (draining writes its snapshot) and started again on the
// same configuration.
type OracleNode struct {
	t      *testing.T
	clk    clock.Clock
	cfg    *config.Config
	Gen    int // how many times it was started, from 1
	gw     *gateway.Gateway
	logs   *syncbuf.Buffer
	base   string
	client *http.Client
	cancel context.CancelFunc
	done   chan error
	up     bool // serving
}

// StartOracleNode builds a gateway from cfg and serves it until stop or
// the end of the test.
func StartOracleNode(t *testing.T, clk clock.Clock, cfg *config.Config) *OracleNode {
	t.Helper()
	n := &OracleNode{t: t, clk: clk, cfg: cfg}
	n.Start()
	t.Cleanup(func() { n.Stop() })
	return n
}

func (n *OracleNode) Start() {
	t := n.t
	t.Helper()
	n.gw, n.logs = Build(t, n.clk, n.cfg)
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.base = "http://" + pub.Addr().String()
	n.client = &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	gw := n.gw
	go func() { n.done <- gw.Serve(ctx, gateway.Listeners{Public: pub, Admin: adm}) }()
	n.Gen++
	n.up = true
}

// Stop drains the gateway (which writes its snapshot when
// cache.persist_path is set) and closes it.
func (n *OracleNode) Stop() {
	if !n.up {
		return
	}
	n.up = false
	n.client.CloseIdleConnections()
	n.cancel()
	select {
	case err := <-n.done:
		if err != nil {
			n.t.Errorf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		n.t.Errorf("gateway did not drain within 30s")
	}
	_ = n.gw.Close()
}

// UpstreamRequests is how many upstream answers the gateway (running, or
// the one stop drained) has read (trendgate_upstream_requests_total counts each attempt once its
// answer is read).
func (n *OracleNode) UpstreamRequests() float64 {
	return Metric(n.t, n.gw.Registry(), "trendgate_upstream_requests_total")
}

// Reply is one gateway response as the oracle saw it.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte // as received (possibly gzip)
	Err    error
}

// Send performs one request on node n. It never calls t.Fatal, so it may
// run on any goroutine.
func (n *OracleNode) Send(method, target, key string, header ...string) Reply {
	req, err := http.NewRequest(method, n.base+"/", nil)
	if err != nil {
		return Reply{Err: err}
	}
	path, query, _ := strings.Cut(target, "?")
	req.URL.Opaque = path // sent verbatim: the client's own escapes
	req.URL.RawQuery = query
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return Reply{Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: body, Err: err}
}

// CountingTap sits in front of the demo upstream and counts the requests
// in flight and arrived, so the oracle can wait for background refreshes
// to end before it moves the clock.
type CountingTap struct {
	Next     http.Handler
	Inflight atomic.Int64
	Arrived  atomic.Int64
}

func (c *CountingTap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.Inflight.Add(1)
	c.Arrived.Add(1)
	defer c.Inflight.Add(-1)
	c.Next.ServeHTTP(w, r)
}

// PathOf names the way an answer left the gateway from its Cache-Status.
func PathOf(cs string) string {
	switch {
	case cs == "":
		return "none"
	case strings.Contains(cs, "detail=range") && strings.Contains(cs, "stale"):
		return "range-stale"
	case strings.Contains(cs, "detail=range"):
		return "range"
	case strings.Contains(cs, "collapsed"):
		return "coalesced"
	case strings.Contains(cs, "widened"):
		return "miss-widened"
	case strings.Contains(cs, "too-large"):
		return "too-large"
	case strings.Contains(cs, "fwd=miss"):
		return "miss"
	case strings.Contains(cs, "upstream-error"):
		return "stale-if-error"
	case strings.Contains(cs, "stale"):
		return "stale"
	case strings.Contains(cs, "hit"):
		return "hit"
	}
	return "other(" + cs + ")"
}

// CountTable counts labels; it is used from one goroutine.
type CountTable map[string]int

func (t CountTable) String() string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-58s %6d\n", k, t[k])
	}
	return b.String()
}

// Unix formats t as unix seconds for a query.
func Unix(t int64) string { return strconv.FormatInt(t, 10) }

// NewRedisDB returns a client for database db of the Redis at addr,
// closed when the test ends (after cleanups registered later, such as
// redistest.Prefix's).
func NewRedisDB(t *testing.T, addr string, db int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
