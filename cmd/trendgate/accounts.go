package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"trendgate/admin"
	"trendgate/config"
	"trendgate/keystore"
)

const accountsUsage = `Usage: trendgate accounts create|update|delete [flags]

Change accounts on a running gateway through its key API (docs/accounts.md):
in force at once (in cluster mode on every instance within a second) and kept
in keys_file (or Redis). Each change writes an audit line.

  create   make an account: -id ID -plan PLAN [-daily N] [-monthly N] [-per-second R] [-burst N]
  update   change an account's numbers: -id ID and any of -daily, -monthly,
           -per-second, -burst (a number, or "default" for the configured value)
  delete   take away an account made through the API: -id ID (refused while a
           key in force names it)

Run "trendgate accounts COMMAND -help" for a command's flags.
`

// runAccounts dispatches trendgate accounts.
func runAccounts(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: trendgate accounts create|update|delete ... (see trendgate accounts -help)")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, accountsUsage)
		return nil
	case "create":
		return runAccountsCreate(args[1:], stdout)
	case "update":
		return runAccountsUpdate(args[1:], stdout)
	case "delete":
		return runAccountsDelete(args[1:], stdout)
	}
	return fmt.Errorf("accounts: unknown command %q (try trendgate accounts -help)", args[0])
}

// numberFlags are the account numbers a command may set; "" is not given,
// "default" returns to the configured value (update only).
type numberFlags struct {
	daily, monthly, perSecond, burst *string
}

func addNumberFlags(fs interface {
	String(name, value, usage string) *string
}) numberFlags {
	return numberFlags{
		daily:     fs.String("daily", "", "daily quota in cost units (0: unlimited)"),
		monthly:   fs.String("monthly", "", "monthly quota in cost units (0: unlimited)"),
		perSecond: fs.String("per-second", "", "token bucket rate of each key (0: no rate limit)"),
		burst:     fs.String("burst", "", "token bucket size of each key"),
	}
}

// body returns the numbers given as JSON members: each a number, or null
// for "default" when allowDefault.
func (n numberFlags) body(cmd string, allowDefault bool) (map[string]any, error) {
	out := map[string]any{}
	for name, v := range map[string]*string{"daily": n.daily, "monthly": n.monthly, "per_second": n.perSecond, "burst": n.burst} {
		switch {
		case *v == "":
		case *v == "default" && allowDefault:
			out[name] = nil
		default:
			f, err := strconv.ParseFloat(*v, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: -%s: %q is not a number", cmd, strings.ReplaceAll(name, "_", "-"), *v)
			}
			out[name] = f
		}
	}
	return out, nil
}

func runAccountsCreate(args []string, stdout io.Writer) error {
	fs := newFlags("accounts create", "Usage: trendgate accounts create [-config FILE | -admin ADDR] -id ID -plan PLAN [-daily N] [-monthly N] [-per-second R] [-burst N]\n\n"+
		"Make an account through POST /accounts; keys join it with trendgate keys create -account.\n"+adminHelp)
	base, path := adminFlags(fs)
	id := fs.String("id", "", "the account's `ID` (required)")
	plan := fs.String("plan", "", "the account's `PLAN` (required)")
	nums := addNumberFlags(fs)
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("accounts create: unexpected argument %q", fs.Arg(0))
	}
	if *id == "" || *plan == "" {
		return errors.New("accounts create: -id and -plan are required")
	}
	if err := config.CheckName(*id); err != nil {
		return fmt.Errorf("accounts create: -id: %w", err)
	}
	m, err := nums.body("accounts create", false)
	if err != nil {
		return err
	}
	m["id"], m["plan"] = *id, *plan
	body, _ := json.Marshal(m)
	// Decoded here as the gateway will, so a bad number is caught before.
	var na keystore.NewAccount
	if err := json.Unmarshal(body, &na); err != nil {
		return fmt.Errorf("accounts create: %w", err)
	}
	root, token, err := adminTarget(fs, *base, *path)
	if err != nil {
		return fmt.Errorf("accounts create: %w", err)
	}
	out, err := adminCall("accounts create", http.MethodPost, root+"/accounts", token, body, http.StatusCreated)
	if err != nil {
		return err
	}
	return printAccount(stdout, "accounts create", out)
}

func runAccountsUpdate(args []string, stdout io.Writer) error {
	fs := newFlags("accounts update", "Usage: trendgate accounts update [-config FILE | -admin ADDR] -id ID [-daily N|default] [-monthly N|default] [-per-second R|default] [-burst N|default]\n\n"+
		"Change an account's numbers through PATCH /accounts/{id}; \"default\" returns one to the configured value.\n"+adminHelp)
	base, path := adminFlags(fs)
	id := fs.String("id", "", "the account's `ID` (required)")
	nums := addNumberFlags(fs)
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("accounts update: unexpected argument %q", fs.Arg(0))
	}
	if *id == "" {
		return errors.New("accounts update: -id is required")
	}
	if err := config.CheckName(*id); err != nil {
		return fmt.Errorf("accounts update: -id: %w", err)
	}
	m, err := nums.body("accounts update", true)
	if err != nil {
		return err
	}
	if len(m) == 0 {
		return errors.New("accounts update: give at least one of -daily, -monthly, -per-second, -burst")
	}
	root, token, err := adminTarget(fs, *base, *path)
	if err != nil {
		return fmt.Errorf("accounts update: %w", err)
	}
	body, _ := json.Marshal(m)
	out, err := adminCall("accounts update", http.MethodPatch, root+"/accounts/"+url.PathEscape(*id), token, body, http.StatusOK)
	if err != nil {
		return err
	}
	return printAccount(stdout, "accounts update", out)
}

func runAccountsDelete(args []string, stdout io.Writer) error {
	fs := newFlags("accounts delete", "Usage: trendgate accounts delete [-config FILE | -admin ADDR] -id ID\n\n"+
		"Take away an account made through the key API (DELETE /accounts/{id}); refused while a key\n"+
		"in force names it, and for an account of the configuration file.\n"+adminHelp)
	base, path := adminFlags(fs)
	id := fs.String("id", "", "the account's `ID` (required)")
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("accounts delete: unexpected argument %q", fs.Arg(0))
	}
	if *id == "" {
		return errors.New("accounts delete: -id is required")
	}
	if err := config.CheckName(*id); err != nil {
		return fmt.Errorf("accounts delete: -id: %w", err)
	}
	root, token, err := adminTarget(fs, *base, *path)
	if err != nil {
		return fmt.Errorf("accounts delete: %w", err)
	}
	out, err := adminCall("accounts delete", http.MethodDelete, root+"/accounts/"+url.PathEscape(*id), token, nil, http.StatusOK)
	if err != nil {
		return err
	}
	var d admin.DeletedAccount
	if err := json.Unmarshal(out, &d); err != nil {
		return fmt.Errorf("accounts delete: the answer is not a deletion: %w", err)
	}
	fmt.Fprintf(stdout, "deleted account %s at %s\n", d.ID, d.Deleted.UTC().Format(time.RFC3339))
	return nil
}

// printAccount prints an account's numbers in force.
func printAccount(w io.Writer, cmd string, body []byte) error {
	var a admin.AccountSettings
	if err := json.Unmarshal(body, &a); err != nil {
		return fmt.Errorf("%s: the answer is not an account: %w", cmd, err)
	}
	fmt.Fprintf(w, "account: %s\nplan: %s\nkeys: %s\ndaily: %d\nmonthly: %d\nper_second: %g\nburst: %d\n",
		a.ID, a.Plan, strings.Join(a.Keys, ", "), a.Daily, a.Monthly, a.PerSecond, a.Burst)
	return nil
}
