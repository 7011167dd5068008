package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// The rows of the table, in order. Each measurement fills one row's cell
// of its setup's column (and a few named values of the JSON file).
const (
	rowStart      = "start until /readyz answers 200"
	rowRSS        = "RSS at rest (VmRSS)"
	rowReload     = "SIGHUP reload, file unchanged"
	rowReloadKey  = "SIGHUP reload, one key added"
	rowCreate     = "key create, POST /keys"
	rowFirstUse   = "first use, never-used keys one after another"
	rowIdleWrites = "disk writes idle, after the first uses"
	rowHits       = "cached hits at a fixed rate"
	rowCPU        = "CPU per cached hit"
	rowLoadWrites = "disk writes under that load"
	rowMetrics    = "/metrics size"
	rowUsage      = "trendgate keys usage, every key"
	rowCheck      = "config check, syntax mistake on the last line"
	rowCluster    = "cluster: key created on A, then in force on B"
)

var rows = []string{
	rowStart, rowRSS, rowReload, rowReloadKey, rowCreate, rowFirstUse, rowIdleWrites,
	rowHits, rowCPU, rowLoadWrites, rowMetrics, rowUsage, rowCheck, rowCluster,
}

// column is one setup's results: the table's cells and, for the JSON
// file, the figures as numbers (seconds, bytes, counts) and the failures.
type column struct {
	Name     string             `json:"name"`
	Keys     int                `json:"keys"`
	Accounts int                `json:"accounts"` // 0: each key its own account
	Values   map[string]float64 `json:"values"`
	Cells    map[string]string  `json:"cells"`
	Failures map[string]string  `json:"failures,omitempty"`
}

func newColumn(s setup) *column {
	accounts := s.accounts
	if accounts == 0 {
		accounts = s.keys
	}
	return &column{Name: s.name(), Keys: s.keys, Accounts: accounts,
		Values: map[string]float64{}, Cells: map[string]string{}, Failures: map[string]string{}}
}

// set fills row's cell with text and logs it as progress.
func (c *column) set(row, text string) {
	c.Cells[row] = text
	fmt.Fprintf(os.Stderr, "scale: [%s] %s: %s\n", c.Name, row, text)
}

// fail fills row's cell with "failed: " and the first line of err.
func (c *column) fail(row string, err error) {
	msg := err.Error()
	c.Failures[row] = msg
	short, _, _ := strings.Cut(msg, "\n")
	if len(short) > 90 {
		short = short[:90] + "…"
	}
	c.set(row, "failed: "+short)
}

// value records a figure for the JSON file.
func (c *column) value(name string, v float64) { c.Values[name] = v }

// report is the whole run, as written to the JSON file.
type report struct {
	Date    time.Time         `json:"date"`
	Host    map[string]string `json:"host"`
	Options map[string]string `json:"options"`
	Columns []*column         `json:"columns"`
}

// markdown writes the table: one row per measurement, one column per
// setup; a cell never filled (the run was interrupted, or an earlier step
// made it impossible) says so.
func (r *report) markdown(w io.Writer) {
	fmt.Fprintf(w, "trendgate scale benchmark, %s\n", r.Date.UTC().Format(time.RFC3339))
	for _, k := range []string{"commit", "cpus", "loadavg", "kernel"} {
		if v := r.Host[k]; v != "" {
			fmt.Fprintf(w, "- %s: %s\n", k, v)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "| keys (keys/accounts) |")
	for _, c := range r.Columns {
		fmt.Fprintf(w, " %s |", c.Name)
	}
	fmt.Fprint(w, "\n|---|")
	for range r.Columns {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, row := range rows {
		fmt.Fprintf(w, "| %s |", row)
		for _, c := range r.Columns {
			cell, ok := c.Cells[row]
			if !ok {
				cell = "not measured"
			}
			fmt.Fprintf(w, " %s |", strings.ReplaceAll(cell, "|", "/"))
		}
		fmt.Fprintln(w)
	}
}

// writeJSON writes the report to path.
func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Formatting helpers for cells.

func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func bytesText(n float64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", n/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", n/(1<<10))
	}
	return fmt.Sprintf("%.0f B", n)
}
