package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

var (
	lineProblemRE    = regexp.MustCompile(`^line (\d+): (.*)$`) // a problem of ours found line by line (env.go)
	timeType         = reflect.TypeOf(time.Time{})
	durationType     = reflect.TypeOf(time.Duration(0))
	configType       = reflect.TypeOf(Config{})
	maxSuggestionGap = 2 // edit distance up to which a known name is suggested
)

// nodeKey identifies a YAML node by line and text (a scalar's value, or
// "!!map" / "!!seq"); several nodes can share a line in flow style.
type nodeKey struct {
	line int
	text string
}

// schemaIndex locates the nodes of one YAML document in the schema of
// Config: the path of every value.
type schemaIndex struct {
	values map[nodeKey]string
}

// indexOf indexes the settings of data when there are problems to place
// and the text parses; otherwise it returns nil.
func indexOf(data []byte, problems []string) *schemaIndex {
	if len(problems) == 0 {
		return nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil
	}
	idx := &schemaIndex{values: make(map[nodeKey]string)}
	idx.walk(doc.Content[0], configType, "")
	return idx
}

// describeLines rewrites problems found line by line in the raw text data
// ("line 7: environment variable X is not set") to start with the YAML path
// of the setting on that line, when the text parses and the line holds
// exactly one setting's value.
func describeLines(data []byte, problems []string) []string {
	idx := indexOf(data, problems)
	if idx == nil {
		return problems
	}
	byLine := make(map[int]string)
	for k, path := range idx.values {
		if k.text == "!!map" || k.text == "!!seq" {
			continue
		}
		if prev, ok := byLine[k.line]; ok && prev != path {
			byLine[k.line] = "" // two settings on one line: keep the line
			continue
		}
		byLine[k.line] = path
	}
	out := make([]string, 0, len(problems))
	for _, p := range problems {
		if m := lineProblemRE.FindStringSubmatch(p); m != nil {
			line, _ := strconv.Atoi(m[1])
			if path := byLine[line]; path != "" {
				p = fmt.Sprintf("%s: %s (line %d)", path, m[2], line)
			}
		}
		out = append(out, p)
	}
	return out
}

// typeWords says in words what a value of type t holds.
func typeWords(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as 5s"
	case t == timeType:
		return "a time such as 2027-01-01T00:00:00Z"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "a mapping"
}

// walk records the paths under node, which decodes into a value of type t.
func (idx *schemaIndex) walk(node *yaml.Node, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if node.Kind == yaml.AliasNode {
		return // its problems, if any, are reported where the anchor is
	}
	text := node.Value
	switch node.Kind {
	case yaml.MappingNode:
		text = "!!map"
	case yaml.SequenceNode:
		text = "!!seq"
	}
	if path != "" {
		idx.values[nodeKey{node.Line, text}] = path
	}
	switch {
	case t.Kind() == reflect.Struct && t != timeType && node.Kind == yaml.MappingNode:
		fields := yamlFields(t)
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			child := join(path, k.Value)
			if ft, ok := fields[k.Value]; ok {
				idx.walk(v, ft, child)
			}
		}
	case t.Kind() == reflect.Map && node.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			idx.walk(node.Content[i+1], t.Elem(), join(path, node.Content[i].Value))
		}
	case t.Kind() == reflect.Slice && node.Kind == yaml.SequenceNode:
		for i, item := range node.Content {
			idx.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// yamlFields maps the YAML names of t's fields (inline structs flattened)
// to their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if opts == "inline" {
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

// suggest returns the known setting nearest to the unknown name under
// path: a name of the same section within maxSuggestionGap edits, else
// the one setting anywhere in the schema spelled exactly name (a setting
// put in the wrong section), else "".
func suggest(name, path string, fields map[string]reflect.Type) string {
	best, bestGap := "", maxSuggestionGap+1
	for known := range fields {
		if gap := editDistance(strings.ToLower(name), known); gap < bestGap || gap == bestGap && known < best {
			best, bestGap = known, gap
		}
	}
	if best != "" && bestGap <= maxSuggestionGap && bestGap < len(name) {
		return join(path, best)
	}
	var found []string
	schemaNamed(configType, "", name, &found)
	if len(found) == 1 {
		return found[0]
	}
	return ""
}

// schemaNamed appends the path of every setting under t called name; map
// keys appear as <name>, list items as [].
func schemaNamed(t reflect.Type, path, name string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct && t != timeType:
		for k, ft := range yamlFields(t) {
			child := join(path, k)
			if k == name {
				*out = append(*out, child)
			}
			schemaNamed(ft, child, name, out)
		}
	case t.Kind() == reflect.Map:
		schemaNamed(t.Elem(), path+".<name>", name, out)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		schemaNamed(t.Elem(), path+"[]", name, out)
	}
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
