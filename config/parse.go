package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error reports every problem found in a configuration at once. Each
// problem starts with the YAML path it is about ("keys[2].plan: unknown
// plan \"gold\"") or, for problems found before decoding, the line
// ("line 7: environment variable X is not set").
type Error struct {
	// File is the file the configuration came from; empty for Parse.
	File string
	// Problems lists the problems in the order they were found.
	Problems []string
}

// Error lists the problems, one per line after the first.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	switch len(e.Problems) {
	case 0:
		b.WriteString("invalid")
	case 1:
		b.WriteString(e.Problems[0])
	default:
		fmt.Fprintf(&b, "%d problems:", len(e.Problems))
		for _, p := range e.Problems {
			b.WriteString("\n\t")
			b.WriteString(p)
		}
	}
	return b.String()
}

// Load reads the file at path and parses it with the process environment
// (see Parse). A parse problem is returned as an *Error naming the file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parseFile(path, data)
}

// parseFile parses data read from path with the process environment and
// names the file in its *Error.
func parseFile(path string, data []byte) (*Config, error) {
	cfg, err := Parse(data, os.LookupEnv)
	var cerr *Error
	if errors.As(err, &cerr) {
		cerr.File = path
	}
	return cfg, err
}

// Parse builds a configuration from YAML text. It first replaces each
// ${NAME} with lookupEnv(NAME) ($${ is a literal ${; comment lines are left
// alone; a nil lookupEnv has no variables), then decodes the text strictly
// (unknown fields are errors) over Default(), so every setting the text
// leaves out keeps its default, and finally validates the result.
//
// Maps merge with the defaults key by key: a plan named in the text
// replaces the built-in plan of that name entirely (fields it leaves out
// are zero, not the built-in's values), and plans it does not name keep
// the built-ins. Lists replace the default list.
//
// On failure it returns a nil *Config and an *Error listing every problem:
// unset variables, variables set but empty in a credential setting
// (upstream.api_key, admin.token, redis.url, redis.cache_url), syntax or type errors and unknown fields with their
// lines, and validation problems with their paths. Validation is skipped
// when the text could not be expanded or parsed, since it would then
// report the same mistake again in other words.
func Parse(data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	expanded, vars, problems := expand(data, lookupEnv)
	problems = describeLines(data, problems)
	problems = append(problems, emptySecrets(data, lookupEnv)...)
	cfg := Default()
	decodeProblems, fatal := decodeStrict(expanded, cfg)
	problems = append(problems, decodeProblems...)
	if len(problems) == 0 || !fatal && len(problems) == len(decodeProblems) {
		var verr *Error
		if errors.As(cfg.Validate(), &verr) {
			problems = append(problems, verr.Problems...)
		}
	}
	if len(problems) > 0 {
		for i := range problems {
			problems[i] = redact(problems[i], vars)
		}
		return nil, &Error{Problems: problems}
	}
	return cfg, nil
}

// decodeStrict decodes one YAML document from data into cfg with unknown
// fields refused. It returns every unknown field and value of the wrong
// type (checkSchema), and whether decoding stopped early (a syntax error,
// several documents, or a value a type's own reader refused), in which
// case cfg is only partly filled.
func decodeStrict(data []byte, cfg *Config) (problems []string, fatal bool) {
	data, keys, fast := fastKeys(data) // the keys block read by hand (fastkeys.go)
	if fast {
		defer func() { cfg.Keys = keys }()
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return nil, false // an empty document keeps every default
	case err != nil:
		return syntaxProblems(data, err), true
	}
	var extra yaml.Node
	if dec.Decode(&extra) != io.EOF {
		return []string{"the file must hold exactly one YAML document"}, true
	}
	problems = checkSchema(&doc)
	// Unknown fields are reported above; decoding sets every known one it
	// can, so that validation can still report the file's other problems.
	err := doc.Decode(cfg)
	var terr *yaml.TypeError
	switch {
	case err == nil:
	case errors.As(err, &terr):
		if len(problems) == 0 {
			problems = terr.Errors // not expected: the check above names each
		}
	default:
		if len(problems) == 0 {
			problems = []string{err.Error()}
		}
		return problems, true
	}
	return problems, false
}

// AdminListen returns admin.listen as the YAML text data sets it (the
// default when it does not), with ${NAME} replaced through lookupEnv. It
// is lenient on purpose: the container health check uses it to find the
// admin listener of a process that is already running, which keeps
// serving while a file edited since then does not validate.
func AdminListen(data []byte, lookupEnv func(string) (string, bool)) (string, error) {
	a, err := AdminAccess(data, lookupEnv)
	return a.Listen, err
}

// AdminAccess returns the admin section as the YAML text data sets it
// (admin.listen defaulted, ${NAME} replaced through lookupEnv), as
// leniently as AdminListen: the admin commands (healthcheck, keys usage)
// use it to reach a running process's admin listener with its token.
func AdminAccess(data []byte, lookupEnv func(string) (string, bool)) (Admin, error) {
	expanded, _, _ := expand(data, lookupEnv)
	var doc struct {
		Admin struct {
			Listen string `yaml:"listen"`
			Token  string `yaml:"token"`
		} `yaml:"admin"`
	}
	doc.Admin.Listen = Default().Admin.Listen
	if err := yaml.Unmarshal(expanded, &doc); err != nil {
		return Admin{}, fmt.Errorf("config: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return Admin{Listen: doc.Admin.Listen, Token: doc.Admin.Token}, nil
}
