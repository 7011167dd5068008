package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"trendgate/admin"
)

// adminTokenEnv names the environment variable keys usage reads the admin
// token from (a flag would show it in the process list).
const adminTokenEnv = "TRENDGATE_ADMIN_TOKEN"

// usagePageLimit is the page size keys usage asks for: the admin API's
// largest, so 100,000 keys take 100 requests of about 1 MB each.
const usagePageLimit = admin.MaxPageLimit

// runKeysUsage fetches GET /accounts and GET /keys page by page (or GET
// /keys/{id}) from the admin listener and prints aligned tables, or the
// JSON with -json.
func runKeysUsage(args []string, stdout io.Writer) error {
	fs := newFlags("keys usage", "Usage: trendgate keys usage [-config FILE | -admin ADDR] [-id ID | -account ID] [-state STATE] [-json]\n\n"+
		"Per-key usage from a running gateway's admin listener: the one the config\n"+
		"FILE's admin.listen sets up (a wildcard host is reached on loopback), or ADDR\n"+
		"(127.0.0.1:9090 or http://127.0.0.1:9090; -admin wins over the file's address).\n"+
		"The admin token is $"+adminTokenEnv+" when set, else the file's admin.token;\n"+
		"it needs the read (or keys) scope. Keys and accounts are read a page at a time,\n"+
		"in id order, however many there are.\n")
	base, path := adminFlags(fs)
	id := fs.String("id", "", "show only the key with this `ID`, with its requests by endpoint and status")
	account := fs.String("account", "", "show only the keys of the account with this `ID`")
	state := fs.String("state", "", "show only the keys in this `STATE` ("+strings.Join(admin.KeyStates, ", ")+")")
	asJSON := fs.Bool("json", false, "print the admin API's JSON instead of a table: one object with generated_at, keys and (without filters) accounts")
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("keys usage: unexpected argument %q", fs.Arg(0))
	}
	if *id != "" && (*account != "" || *state != "") {
		return errors.New("keys usage: -id shows one key; it does not combine with -account or -state")
	}
	root, token, err := adminTarget(fs, *base, *path)
	if err != nil {
		return fmt.Errorf("keys usage: %w", err)
	}
	if *id != "" {
		target := root + "/keys/" + url.PathEscape(*id)
		body, err := adminGet(target, token)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeIndented(stdout, target, body)
		}
		var k admin.KeyUsage
		if err := json.Unmarshal(body, &k); err != nil {
			return fmt.Errorf("keys usage: %s: %w", target, err)
		}
		printUsage(stdout, []admin.KeyUsage{k}, true)
		return nil
	}
	filter := url.Values{}
	if *account != "" {
		filter.Set("account", *account)
	}
	if *state != "" {
		filter.Set("state", *state)
	}
	var dump usageDump
	if len(filter) == 0 {
		if err := readPages(root+"/accounts", token, nil, func(body []byte) (string, error) {
			var page admin.AccountList
			err := json.Unmarshal(body, &page)
			dump.Accounts = append(dump.Accounts, page.Accounts...)
			return deref(page.NextCursor), err
		}); err != nil {
			return err
		}
	}
	if err := readPages(root+"/keys", token, filter, func(body []byte) (string, error) {
		var page admin.KeyList
		err := json.Unmarshal(body, &page)
		if dump.GeneratedAt.IsZero() {
			dump.GeneratedAt = page.GeneratedAt
		}
		dump.Keys = append(dump.Keys, page.Keys...)
		return deref(page.NextCursor), err
	}); err != nil {
		return err
	}
	if dump.Keys == nil {
		dump.Keys = []admin.KeyUsage{}
	}
	if *asJSON {
		b, err := json.MarshalIndent(dump, "", "  ")
		if err != nil {
			return fmt.Errorf("keys usage: %w", err)
		}
		_, err = stdout.Write(append(b, '\n'))
		return err
	}
	printAccounts(stdout, dump.Accounts)
	printUsage(stdout, dump.Keys, false)
	return nil
}

// usageDump is what keys usage -json prints: every page put together.
type usageDump struct {
	GeneratedAt time.Time            `json:"generated_at"`
	Keys        []admin.KeyUsage     `json:"keys"`
	Accounts    []admin.AccountUsage `json:"accounts,omitempty"`
}

// readPages GETs list (with the query filter) page by page, handing each
// page's body to read, which returns the page's next cursor ("" on the
// last page).
func readPages(list, token string, filter url.Values, read func(body []byte) (string, error)) error {
	next := ""
	for {
		q := url.Values{"limit": {strconv.Itoa(usagePageLimit)}}
		for k, v := range filter {
			q[k] = v
		}
		if next != "" {
			q.Set("cursor", next)
		}
		target := list + "?" + q.Encode()
		body, err := adminGet(target, token)
		if err != nil {
			return err
		}
		cursor, err := read(body)
		if err != nil {
			return fmt.Errorf("keys usage: %s: %w", target, err)
		}
		if cursor == "" {
			return nil
		}
		if cursor == next {
			return fmt.Errorf("keys usage: %s answered the same cursor again", target)
		}
		next = cursor
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// writeIndented writes the JSON body indented, followed by a newline.
func writeIndented(w io.Writer, target string, body []byte) error {
	var out bytes.Buffer
	if err := json.Indent(&out, body, "", "  "); err != nil {
		return fmt.Errorf("keys usage: %s did not answer JSON: %w", target, err)
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// adminTarget resolves the admin listener's base URL and token: from the
// config file at path (when given), the -admin flag's base (when set on
// the command line, or without path) and $TRENDGATE_ADMIN_TOKEN (which
// wins over the file's token).
func adminTarget(fs *flag.FlagSet, base, path string) (root, token string, err error) {
	if path != "" {
		fileBase, fileToken, err := adminAccess(path)
		if err != nil {
			return "", "", err
		}
		token = fileToken
		if !flagSet(fs, "admin") {
			base = fileBase
		}
	}
	if env, ok := os.LookupEnv(adminTokenEnv); ok && env != "" {
		token = env
	}
	u, err := parseAdminURL(base)
	if err != nil {
		return "", "", fmt.Errorf("-admin: %w", err)
	}
	return strings.TrimRight(u.String(), "/"), token, nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// adminGet GETs target with the admin token (if any) and returns the body
// of a 200; any other answer becomes an error quoting the JSON error.
func adminGet(target, token string) ([]byte, error) {
	return adminCall("keys usage", http.MethodGet, target, token, nil, http.StatusOK)
}

// adminCall sends method target with the admin token (if any) and body
// (JSON; none when nil), and returns the answer's body when its status is
// want; any other answer becomes an error, named after cmd, quoting the
// JSON error.
func adminCall(cmd, method, target, token string, body []byte, want int) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: reading %s: %w", cmd, target, err)
	}
	// 202 is a success where 200 is: done in part, the rest later (a
	// revocation while Redis is out of reach); the body says so.
	if resp.StatusCode != want && !(want == http.StatusOK && resp.StatusCode == http.StatusAccepted) {
		var e struct{ Error, Code string }
		if json.Unmarshal(out, &e) == nil && e.Code != "" {
			msg := fmt.Sprintf("%s: %s answered %d %s: %s", cmd, target, resp.StatusCode, e.Code, e.Error)
			if resp.StatusCode == http.StatusUnauthorized {
				msg += " (set $" + adminTokenEnv + ", or give -config with the file that sets admin.token)"
			}
			return nil, errors.New(msg)
		}
		return nil, fmt.Errorf("%s: %s answered %s", cmd, target, resp.Status)
	}
	return out, nil
}

// printAccounts writes accounts as an aligned table followed by a blank
// line; nothing when every key is an account of its own.
func printAccounts(w io.Writer, accounts []admin.AccountUsage) {
	shared := false
	for _, a := range accounts {
		shared = shared || len(a.Keys) > 1 || (len(a.Keys) == 1 && a.Keys[0] != a.ID)
	}
	if !shared {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tPLAN\tKEYS\tDAILY USED/LIMIT\tMONTHLY USED/LIMIT\t24H REQUESTS\t24H UNITS\t24H UPSTREAM\tSOURCE")
	for _, a := range accounts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", a.ID, a.Plan, strings.Join(a.Keys, ","),
			quotaCell(a.Daily), quotaCell(a.Monthly), a.Last24h.Requests, a.Last24h.Units, a.Last24h.UpstreamCalls, a.Source)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
}

// printUsage writes keys as an aligned table; with detail, each key's
// requests by endpoint and status follow. The quota columns are the key's
// account's.
func printUsage(w io.Writer, keys []admin.KeyUsage, detail bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tACCOUNT\tPLAN\tSTATE\tDAILY USED/LIMIT\tMONTHLY USED/LIMIT\tTOKENS/BURST\t24H REQUESTS\t24H UNITS\t24H UPSTREAM\tLAST SEEN\tSOURCE")
	for _, k := range keys {
		tokens := "-"
		if k.Rate != nil {
			tokens = fmt.Sprintf("%d/%d", k.Rate.Tokens, k.Rate.Burst)
		}
		last := "never"
		if k.LastSeen != nil {
			last = k.LastSeen.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", k.ID, k.Account, k.Plan, k.State,
			quotaCell(k.Daily), quotaCell(k.Monthly), tokens, k.Last24h.Requests, k.Last24h.Units, k.Last24h.UpstreamCalls, last, k.Source)
	}
	_ = tw.Flush()
	if !detail {
		return
	}
	for _, k := range keys {
		fmt.Fprintf(w, "\n%s: daily quota resets %s, monthly %s; last 24 h (this instance) since %s:\n", k.ID,
			k.Daily.ResetsAt.UTC().Format(time.RFC3339), k.Monthly.ResetsAt.UTC().Format(time.RFC3339), k.Last24h.Since.UTC().Format(time.RFC3339))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "ENDPOINT\tSTATUS\tREQUESTS\tUNITS\t")
		for _, c := range k.Last24h.ByEndpoint {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t\n", c.Endpoint, c.Status, c.Requests, c.Units)
		}
		_ = tw.Flush()
	}
}

// quotaCell is "used/limit", "used/unlimited" for a quota that is off.
func quotaCell(q admin.QuotaUsage) string {
	if q.Limit <= 0 {
		return strconv.FormatInt(q.Used, 10) + "/unlimited"
	}
	return strconv.FormatInt(q.Used, 10) + "/" + strconv.FormatInt(q.Limit, 10)
}
