// Package rollup keeps daily usage rollups per account and per key, the
// history an operator bills from: units charged, requests by route and
// outcome class, upstream calls caused and bytes sent, one row per key and
// UTC day that saw any of them. Only non-zero cells are kept, so a key not
// used on a day costs nothing for that day.
//
// Two stores implement it: Local keeps the rollups in memory and in an
// append-only file of its own (single instance); Redis keeps them in one
// hash per account and day shared by every instance (cluster mode). Both
// take events on the request path without I/O and write them in batches.
//
// Month close: a month's totals are final at its UTC end. An event that
// reaches the store after that end (a request that straddled midnight, a
// batch written late by another instance) lands in the open month's first
// day it can reach, today, never in the closed month.
package rollup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"
)

// Date is a UTC calendar day as YYYYMMDD (20261103). The zero value is no
// day.
type Date int32

// DateOf returns the UTC day containing t.
func DateOf(t time.Time) Date {
	y, m, d := t.UTC().Date()
	return Date(y*10000 + int(m)*100 + d)
}

// ErrBadDate is returned by ParseDate for anything but a valid YYYY-MM-DD.
var ErrBadDate = errors.New("rollup: a date must be YYYY-MM-DD")

// ParseDate parses a YYYY-MM-DD UTC date.
func ParseDate(s string) (Date, error) {
	if len(s) != 10 {
		return 0, ErrBadDate
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return 0, ErrBadDate
	}
	return DateOf(t), nil
}

// Time returns the start of d (UTC midnight).
func (d Date) Time() time.Time {
	return time.Date(int(d)/10000, time.Month(int(d)/100%100), int(d)%100, 0, 0, 0, 0, time.UTC)
}

// AddDays returns the day n days after d (before, for negative n).
func (d Date) AddDays(n int) Date { return DateOf(d.Time().AddDate(0, 0, n)) }

// Month returns d's month as YYYYMM.
func (d Date) Month() int { return int(d) / 100 }

// String formats d as YYYY-MM-DD.
func (d Date) String() string {
	if d == 0 {
		return ""
	}
	return d.Time().Format(time.DateOnly)
}

// MarshalJSON writes d as "YYYY-MM-DD".
func (d Date) MarshalJSON() ([]byte, error) { return strconv.AppendQuote(nil, d.String()), nil }

// UnmarshalJSON reads "YYYY-MM-DD".
func (d *Date) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return ErrBadDate
	}
	if s == "" {
		*d = 0
		return nil
	}
	v, err := ParseDate(s)
	*d = v
	return err
}

// epochDays is the number of days from 1970-01-01 to d, the form the file
// stores.
func (d Date) epochDays() int64 { return d.Time().Unix() / 86400 }

func dateFromEpochDays(n int64) Date { return DateOf(time.Unix(n*86400, 0)) }

// Class is a request's outcome class. The zero value is Class2xx.
type Class uint8

// The outcome classes. Class2xx is a delivered response (2xx or 304, the
// responses that are charged); any other 1xx-3xx falls in it too.
const (
	Class2xx Class = iota
	Class4xx
	Class429
	Class5xx
	numClasses
)

var classNames = [numClasses]string{"2xx", "4xx", "429", "5xx"}

// ClassOf returns the class of an HTTP status.
func ClassOf(status int) Class {
	switch {
	case status == 429:
		return Class429
	case status >= 500:
		return Class5xx
	case status >= 400:
		return Class4xx
	}
	return Class2xx
}

// String returns "2xx", "4xx", "429" or "5xx".
func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return "class" + strconv.Itoa(int(c))
}

// MarshalText writes the class's name.
func (c Class) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a class's name.
func (c *Class) UnmarshalText(b []byte) error {
	for i, n := range classNames {
		if n == string(b) {
			*c = Class(i)
			return nil
		}
	}
	return fmt.Errorf("rollup: unknown outcome class %q", b)
}

// Event is what one request (or one upstream call) adds to a key's day.
// Zero fields add nothing.
type Event struct {
	// Day is the UTC day the event counts in: for a charged request, the
	// day its quota reservation was made in, so that the rollup's day is
	// the quota counter's. The zero Date means the store's today.
	Day     Date
	Account string // the key's account; "" means the key is its own
	Key     string
	// Route is the endpoint's or configured route's name, and Class the
	// outcome: they count Requests requests.
	Route    string
	Class    Class
	Requests int64
	// Units are the quota units charged (delivered responses only).
	Units int64
	// Upstream is the upstream calls the request caused.
	Upstream int64
	// Bytes is the response body bytes sent.
	Bytes int64
}

// Cell is the requests of one route and outcome class.
type Cell struct {
	Route    string `json:"route"`
	Class    Class  `json:"outcome"`
	Requests int64  `json:"requests"`
}

// Day is one UTC day of an account's or a key's usage.
type Day struct {
	Date          Date  `json:"date,omitempty"` // absent in a Series' Total
	Units         int64 `json:"units"`
	Requests      int64 `json:"requests"`
	UpstreamCalls int64 `json:"upstream_calls"`
	BytesSent     int64 `json:"bytes_sent"`
	// Endpoints are the requests by route and outcome, sorted by route
	// then class; only non-zero cells.
	Endpoints []Cell `json:"endpoints"`
}

// Series is the days of one account (Key "") or one key that saw usage
// in a range, oldest first, and their sum. Days without usage are absent.
type Series struct {
	Account string `json:"account"`
	Key     string `json:"key,omitempty"`
	Days    []Day  `json:"days"`
	Total   Day    `json:"total"`
}

// Query selects what Store.Query reads: every account (Account and Key
// empty), one account, or one key of Account. From and To are inclusive.
type Query struct {
	From, To Date
	Account  string
	Key      string
	// After and Limit page through every account (Account empty): only
	// accounts whose id sorts after After, and at most Limit of them (0:
	// no limit).
	After string
	Limit int
}

// page returns the ids of accounts, sorted, that q's After and Limit
// select when q reads every account.
func (q Query) page(accounts []string) []string {
	slices.Sort(accounts)
	accounts = accounts[sort.SearchStrings(accounts, q.After):]
	if len(accounts) > 0 && accounts[0] == q.After {
		accounts = accounts[1:]
	}
	if q.Limit > 0 && len(accounts) > q.Limit {
		accounts = accounts[:q.Limit]
	}
	return accounts
}

// Store is what the gateway needs of a rollup store; Local and Redis
// implement it.
type Store interface {
	// Record adds e; it does no I/O and never blocks on it.
	Record(e Event)
	// Query reads the rollups q selects: one Series per account (or the
	// one key), sorted by account.
	Query(ctx context.Context, q Query) ([]Series, error)
	// Oldest is the first day still kept at now (the retention).
	Oldest(now time.Time) Date
}

var (
	_ Store = (*Local)(nil)
	_ Store = (*Redis)(nil)
)

// ErrRange is returned by Query for a range whose From is after To.
var ErrRange = errors.New("rollup: from is after to")

// landing returns the day an event for day d is counted in at today: d,
// unless d is zero, in the future, or in a month closed before today
// (see the package comment), when it is today.
func landing(d, today Date) Date {
	if d == 0 || d > today || d.Month() != today.Month() {
		return today
	}
	return d
}

// rowKey names one key's day.
type rowKey struct {
	day     Date
	account string
	key     string
}

// row is one key's day. reqs holds only non-zero cells.
type row struct {
	units, upstream, bytes int64
	reqs                   []Cell
}

func (r *row) add(e *Event) {
	r.units += e.Units
	r.upstream += e.Upstream
	r.bytes += e.Bytes
	if e.Requests != 0 {
		r.addCell(e.Route, e.Class, e.Requests)
	}
}

func (r *row) addCell(route string, c Class, n int64) {
	for i := range r.reqs {
		if r.reqs[i].Route == route && r.reqs[i].Class == c {
			r.reqs[i].Requests += n
			return
		}
	}
	r.reqs = append(r.reqs, Cell{Route: route, Class: c, Requests: n})
}

func (r *row) merge(o *row) {
	r.units += o.units
	r.upstream += o.upstream
	r.bytes += o.bytes
	for _, c := range o.reqs {
		r.addCell(c.Route, c.Class, c.Requests)
	}
}

// table is a set of rows; the zero value is not usable (see newTable).
type table struct{ rows map[rowKey]*row }

func newTable() table { return table{rows: make(map[rowKey]*row)} }

// put returns the row of k, creating it.
func (t table) put(k rowKey) *row {
	r := t.rows[k]
	if r == nil {
		r = &row{}
		t.rows[k] = r
	}
	return r
}

func (t table) add(day Date, e *Event) {
	k := rowKey{day, e.Account, e.Key}
	r := t.rows[k]
	if r == nil {
		r = &row{}
		t.rows[k] = r
	}
	r.add(e)
}

func (t table) merge(k rowKey, o *row) {
	r := t.rows[k]
	if r == nil {
		r = &row{}
		t.rows[k] = r
	}
	r.merge(o)
}

// collect sums rows into Series: per account, or per key when byKey.
// match picks the rows.
func collect(rows func(yield func(rowKey, *row)), byKey bool) []Series {
	type sk struct{ account, key string }
	days := map[sk]map[Date]*Day{}
	rows(func(k rowKey, r *row) {
		s := sk{account: k.account}
		if byKey {
			s.key = k.key
		}
		m := days[s]
		if m == nil {
			m = map[Date]*Day{}
			days[s] = m
		}
		d := m[k.day]
		if d == nil {
			d = &Day{Date: k.day}
			m[k.day] = d
		}
		addRow(d, r)
	})
	out := make([]Series, 0, len(days))
	for s, m := range days {
		se := Series{Account: s.account, Key: s.key, Total: Day{}}
		for _, d := range m {
			se.Days = append(se.Days, *d)
		}
		sort.Slice(se.Days, func(i, j int) bool { return se.Days[i].Date < se.Days[j].Date })
		for i := range se.Days {
			sortCells(se.Days[i].Endpoints)
			addDay(&se.Total, &se.Days[i])
		}
		sortCells(se.Total.Endpoints)
		out = append(out, se)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Account != out[j].Account {
			return out[i].Account < out[j].Account
		}
		return out[i].Key < out[j].Key
	})
	return out
}

func addRow(d *Day, r *row) {
	d.Units += r.units
	d.UpstreamCalls += r.upstream
	d.BytesSent += r.bytes
	for _, c := range r.reqs {
		d.Requests += c.Requests
		d.Endpoints = addCell(d.Endpoints, c)
	}
}

func addDay(d *Day, o *Day) {
	d.Units += o.Units
	d.Requests += o.Requests
	d.UpstreamCalls += o.UpstreamCalls
	d.BytesSent += o.BytesSent
	for _, c := range o.Endpoints {
		d.Endpoints = addCell(d.Endpoints, c)
	}
}

func addCell(cs []Cell, c Cell) []Cell {
	for i := range cs {
		if cs[i].Route == c.Route && cs[i].Class == c.Class {
			cs[i].Requests += c.Requests
			return cs
		}
	}
	return append(cs, c)
}

func sortCells(cs []Cell) {
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].Route != cs[j].Route {
			return cs[i].Route < cs[j].Route
		}
		return cs[i].Class < cs[j].Class
	})
}

// Config is the rollups' configuration (the usage section).
type Config struct {
	// RetentionDays is how many UTC days of rollups are kept, today
	// included; older days are dropped. 0 means the default, 400.
	RetentionDays int `yaml:"retention_days"`
	// FlushInterval is how often recorded events are written (to the
	// file, or to Redis in cluster mode); nothing is written while idle.
	// 0 means the default, 1s.
	FlushInterval time.Duration `yaml:"flush_interval"`
}

// Defaults.
const (
	DefaultRetentionDays = 400
	DefaultFlushInterval = time.Second
)

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{RetentionDays: DefaultRetentionDays, FlushInterval: DefaultFlushInterval}
}

// Validate reports settings out of range.
func (c Config) Validate() error {
	var errs []error
	if c.RetentionDays < 0 || c.RetentionDays > 3660 {
		errs = append(errs, fmt.Errorf("retention_days: %d is outside 1..3660 (0: the default, %d)", c.RetentionDays, DefaultRetentionDays))
	}
	if c.FlushInterval != 0 && (c.FlushInterval < 10*time.Millisecond || c.FlushInterval > time.Minute) {
		errs = append(errs, fmt.Errorf("flush_interval: %s is outside 10ms..1m", c.FlushInterval))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.RetentionDays == 0 {
		c.RetentionDays = DefaultRetentionDays
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	return c
}

// oldest is the first day kept at today under a retention of days.
func oldest(today Date, days int) Date { return today.AddDays(1 - days) }

// ClosedMonth reports whether the month of d was closed at now: its UTC
// end has passed, so its totals are final.
func ClosedMonth(d Date, now time.Time) bool { return d.Month() < DateOf(now).Month() }
