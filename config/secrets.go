package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// secretSettings are the settings that carry credentials. A ${NAME} in one
// of them whose variable is set but empty is a problem: the setting would
// silently lose its credential (the upstream called without one, the admin
// routes left open, Redis without its password).
var secretSettings = [][]string{
	{"upstream", "api_key"},
	{"admin", "token"},
	{"redis", "url"},
	{"redis", "cache_url"},
}

// emptySecrets returns one problem for each ${NAME} in a secret setting of
// the raw (unexpanded) text data whose variable lookupEnv reports set but
// empty. Text that does not parse yields nothing: decoding reports it.
func emptySecrets(data []byte, lookupEnv func(string) (string, bool)) []string {
	if lookupEnv == nil || !strings.Contains(string(data), "${") {
		return nil
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	var problems []string
	for _, path := range secretSettings {
		v := lookup(doc.Content[0], path)
		if v == nil || v.Kind != yaml.ScalarNode {
			continue
		}
		for _, name := range references(v.Value) {
			if val, ok := lookupEnv(name); ok && val == "" {
				problems = append(problems, fmt.Sprintf("%s: environment variable %s is set but empty (line %d); a credential must not be empty",
					strings.Join(path, "."), name, v.Line))
			}
		}
	}
	return problems
}

// lookup returns the value node at path under the mapping node m, or nil.
func lookup(m *yaml.Node, path []string) *yaml.Node {
	for _, name := range path {
		if m.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == name {
				next = m.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		m = next
	}
	return m
}

// references returns the variable names of the ${NAME} references in s,
// skipping the $${ escape.
func references(s string) []string {
	var names []string
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return names
			}
			if name := s[i+2 : i+2+end]; validEnvName(name) {
				names = append(names, name)
			}
			i += 2 + end + 1
		default:
			i++
		}
	}
	return names
}
