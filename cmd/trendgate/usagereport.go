package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"trendgate/admin"
)

// runUsage runs the usage subcommands: report.
func runUsage(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "report" {
		return fmt.Errorf("usage: trendgate usage report -month YYYY-MM [-account ID] [-csv] [-config FILE | -admin ADDR]")
	}
	return runUsageReport(args[1:], stdout)
}

// runUsageReport reads one UTC month of the usage history from the admin
// listener (GET /usage, or /accounts/{id}/usage) and prints a table per
// account, or the admin API's own CSV export with -csv.
func runUsageReport(args []string, stdout io.Writer) error {
	fs := newFlags("usage report", "Usage: trendgate usage report -month YYYY-MM [-account ID] [-csv] [-config FILE | -admin ADDR]\n\n"+
		"One UTC month of the usage history from a running gateway's admin listener: a table\n"+
		"per account (its days: units, requests, upstream calls, bytes, and the month's total),\n"+
		"or with -csv the admin API's CSV export (one row per account and day). A month that\n"+
		"has not ended is read up to today. The admin listener and token are found as for\n"+
		"keys usage: -admin ADDR, else the config FILE's admin.listen; $"+adminTokenEnv+" else admin.token.\n")
	base, path := adminFlags(fs)
	month := fs.String("month", "", "the UTC `YYYY-MM` month to report (required)")
	account := fs.String("account", "", "report only the account with this `ID`")
	asCSV := fs.Bool("csv", false, "print CSV (the admin API's export) instead of tables")
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("usage report: unexpected argument %q", fs.Arg(0))
	}
	start, err := time.Parse("2006-01", *month)
	if err != nil || len(*month) != 7 {
		return fmt.Errorf("usage report: -month must be YYYY-MM, got %q", *month)
	}
	root, token, err := adminTarget(fs, *base, *path)
	if err != nil {
		return fmt.Errorf("usage report: %w", err)
	}
	end := start.AddDate(0, 1, -1)
	target := root + "/usage"
	if *account != "" {
		target = root + "/accounts/" + url.PathEscape(*account) + "/usage"
	}
	target += "?from=" + start.Format(time.DateOnly) + "&to=" + end.Format(time.DateOnly)
	// GET /usage (every account) answers a page of accounts at a time:
	// follow its cursor to the end. An account's own route is one page.
	paged := *account == ""
	if paged {
		target += "&limit=" + strconv.Itoa(admin.MaxPageLimit)
	}
	if *asCSV {
		for next, first := "", true; first || next != ""; first = false {
			page := target
			if next != "" {
				page += "&cursor=" + url.QueryEscape(next)
			}
			body, cursor, err := adminGetAccept(page, token, "text/csv")
			if err != nil {
				return err
			}
			if !first { // the header row once
				_, body, _ = bytes.Cut(body, []byte("\n"))
			}
			if _, err := stdout.Write(body); err != nil {
				return err
			}
			next = cursor
		}
		return nil
	}
	var h admin.UsageHistory
	for next, first := "", true; first || next != ""; first = false {
		page := target
		if next != "" {
			page += "&cursor=" + url.QueryEscape(next)
		}
		body, _, err := adminGetAccept(page, token, "application/json")
		if err != nil {
			return err
		}
		var p admin.UsageHistory
		if err := json.Unmarshal(body, &p); err != nil {
			return fmt.Errorf("usage report: %s: %w", page, err)
		}
		h.From, h.To, h.Series = p.From, p.To, append(h.Series, p.Series...)
		next = ""
		if p.NextCursor != nil && paged {
			next = *p.NextCursor
		}
	}
	fmt.Fprintf(stdout, "usage %s to %s (UTC)\n", h.From, h.To)
	if len(h.Series) == 0 {
		fmt.Fprintln(stdout, "\nno usage in this range")
	}
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, s := range h.Series {
		fmt.Fprintf(stdout, "\naccount %s\n", s.Account)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "date\tunits\trequests\tupstream calls\tbytes sent\t")
		for _, d := range s.Days {
			fmt.Fprintln(tw, d.Date.String()+"\t"+i64(d.Units)+"\t"+i64(d.Requests)+"\t"+i64(d.UpstreamCalls)+"\t"+i64(d.BytesSent)+"\t")
		}
		t := s.Total
		fmt.Fprintln(tw, "total\t"+i64(t.Units)+"\t"+i64(t.Requests)+"\t"+i64(t.UpstreamCalls)+"\t"+i64(t.BytesSent)+"\t")
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// adminGetAccept is adminGet asking for the media type accept; it also
// returns the next page's cursor a CSV answer names (admin.NextCursorHeader).
func adminGetAccept(target, token, accept string) ([]byte, string, error) {
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		return nil, "", fmt.Errorf("usage report: %w", err)
	}
	req.Header.Set("Accept", accept)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("usage report: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, "", fmt.Errorf("usage report: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error, Code string }
		_ = json.Unmarshal(body, &e)
		return nil, "", fmt.Errorf("usage report: %s answered %s: %s (%s)", target, resp.Status, e.Error, e.Code)
	}
	return body, resp.Header.Get(admin.NextCursorHeader), nil
}
