package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"trendgate/admin"
	"trendgate/config"
	"trendgate/keystore"
)

// adminFlags adds the flags every key API command shares: where the admin
// listener is, and the file to read it (and its token) from.
func adminFlags(fs *flag.FlagSet) (base, path *string) {
	base = fs.String("admin", "http://127.0.0.1:9090", "admin listener `ADDR`: host:port or a base URL")
	path = fs.String("config", "", "configuration `FILE` whose admin.listen and admin.token to use")
	return base, path
}

const adminHelp = "The admin listener is the config FILE's admin.listen (-config) or ADDR\n" +
	"(-admin wins); the admin token is $" + adminTokenEnv + " when set, else the file's admin.token.\n"

// runKeysCreate makes a key through POST /keys and prints its secret.
func runKeysCreate(args []string, stdout io.Writer) error {
	fs := newFlags("keys create", "Usage: trendgate keys create [-config FILE | -admin ADDR] -id ID (-account ACCOUNT | -plan PLAN) [-expires TIME] [-not-before TIME] [-json]\n\n"+
		"Create a key on a running gateway through its key API: in force at once (in cluster\n"+
		"mode on every instance within a second) and kept in keys_file (or Redis). The\n"+
		"secret is printed once. TIME is RFC 3339, e.g. 2027-01-01T00:00:00Z.\n"+adminHelp)
	base, path := adminFlags(fs)
	var nk keystore.NewKey
	fs.StringVar(&nk.ID, "id", "", "the new key's `ID` (required)")
	fs.StringVar(&nk.Account, "account", "", "the `ACCOUNT` the key joins (shares its plan and quotas)")
	fs.StringVar(&nk.Plan, "plan", "", "`PLAN` of a key that is an account of its own (instead of -account)")
	expires := fs.String("expires", "", "refuse the key from `TIME` on")
	notBefore := fs.String("not-before", "", "refuse the key before `TIME`")
	asJSON := fs.Bool("json", false, "print the key API's JSON answer")
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("keys create: unexpected argument %q", fs.Arg(0))
	}
	if nk.ID == "" || (nk.Account == "") == (nk.Plan == "") {
		return errors.New("keys create: -id and one of -account or -plan are required")
	}
	var err error
	if nk.Expires, err = timeFlag("expires", *expires); err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	if nk.NotBefore, err = timeFlag("not-before", *notBefore); err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	root, token, err := adminTarget(fs, *base, *path)
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	body, _ := json.Marshal(nk)
	out, err := adminCall("keys create", http.MethodPost, root+"/keys", token, body, http.StatusCreated)
	if err != nil {
		return err
	}
	return printCreated(stdout, "keys create", out, *asJSON)
}

// runKeysRotate makes a key's successor through POST /keys/{id}/rotate.
func runKeysRotate(args []string, stdout io.Writer) error {
	fs := newFlags("keys rotate", "Usage: trendgate keys rotate [-config FILE | -admin ADDR] -id ID [-new-id ID] [-overlap DURATION] [-json]\n\n"+
		"Rotate a key: a new key in the same account (so both draw on one quota), and the\n"+
		"old key refused once the overlap ends. The new secret is printed once.\n"+adminHelp)
	base, path := adminFlags(fs)
	id := fs.String("id", "", "`ID` of the key to rotate (required)")
	var req admin.RotateRequest
	fs.StringVar(&req.NewID, "new-id", "", "the new key's `ID` (default: ID-r1, or the next free -rN)")
	fs.StringVar(&req.Overlap, "overlap", "", "how long the old key stays valid, as a `DURATION` such as 24h or 90m (default 24h)")
	asJSON := fs.Bool("json", false, "print the key API's JSON answer")
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("keys rotate: unexpected argument %q", fs.Arg(0))
	}
	if *id == "" {
		return errors.New("keys rotate: -id is required")
	}
	if err := config.CheckName(*id); err != nil {
		return fmt.Errorf("keys rotate: -id: %w", err)
	}
	root, token, err := adminTarget(fs, *base, *path)
	if err != nil {
		return fmt.Errorf("keys rotate: %w", err)
	}
	body, _ := json.Marshal(req)
	out, err := adminCall("keys rotate", http.MethodPost, root+"/keys/"+url.PathEscape(*id)+"/rotate", token, body, http.StatusCreated)
	if err != nil {
		return err
	}
	return printCreated(stdout, "keys rotate", out, *asJSON)
}

// runKeysRevoke takes a key out of force through DELETE /keys/{id}.
func runKeysRevoke(args []string, stdout io.Writer) error {
	fs := newFlags("keys revoke", "Usage: trendgate keys revoke [-config FILE | -admin ADDR] -id ID\n\n"+
		"Revoke a key: refused from now on (in cluster mode by every instance within a\n"+
		"second), whether it was made through the key API or is in the config file.\n"+adminHelp)
	base, path := adminFlags(fs)
	id := fs.String("id", "", "`ID` of the key to revoke (required)")
	if help, err := parseFlags(fs, args, stdout); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("keys revoke: unexpected argument %q", fs.Arg(0))
	}
	if *id == "" {
		return errors.New("keys revoke: -id is required")
	}
	if err := config.CheckName(*id); err != nil {
		return fmt.Errorf("keys revoke: -id: %w", err)
	}
	root, token, err := adminTarget(fs, *base, *path)
	if err != nil {
		return fmt.Errorf("keys revoke: %w", err)
	}
	out, err := adminCall("keys revoke", http.MethodDelete, root+"/keys/"+url.PathEscape(*id), token, nil, http.StatusOK)
	if err != nil {
		return err
	}
	var r admin.RevokedKey
	if err := json.Unmarshal(out, &r); err != nil {
		return fmt.Errorf("keys revoke: the answer is not a revocation: %w", err)
	}
	fmt.Fprintf(stdout, "revoked %s at %s\n", r.ID, r.Revoked.UTC().Format(time.RFC3339))
	if r.Pending {
		fmt.Fprintln(stdout, "pending: Redis is out of reach; the key is refused by the instance that answered now, "+
			"and by every other instance once the revocation is stored (when Redis is back)")
	}
	return nil
}

// printCreated prints a created key: its secret first, once.
func printCreated(w io.Writer, cmd string, body []byte, asJSON bool) error {
	var k admin.CreatedKey
	if err := json.Unmarshal(body, &k); err != nil || k.Secret == "" {
		return fmt.Errorf("%s: the answer holds no key", cmd)
	}
	if asJSON {
		_, err := w.Write(append(body, '\n'))
		return err
	}
	fmt.Fprintf(w, "secret: %s\n# The secret is shown only this once; the gateway keeps only its digest.\n", k.Secret)
	fmt.Fprintf(w, "id: %s\naccount: %s\nplan: %s\ncreated: %s\n", k.ID, k.Account, k.Plan, k.Created.UTC().Format(time.RFC3339))
	if k.NotBefore != nil {
		fmt.Fprintf(w, "not_before: %s\n", k.NotBefore.UTC().Format(time.RFC3339))
	}
	if k.Expires != nil {
		fmt.Fprintf(w, "expires: %s\n", k.Expires.UTC().Format(time.RFC3339))
	}
	if k.Replaces != nil {
		fmt.Fprintf(w, "replaces: %s (valid until %s)\n", k.Replaces.ID, k.Replaces.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// timeFlag parses an RFC 3339 flag value; empty is nil.
func timeFlag(name, v string) (*time.Time, error) {
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, fmt.Errorf("-%s: %q is not an RFC 3339 time such as 2027-01-01T00:00:00Z", name, v)
	}
	return &t, nil
}
