package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// unmarshalerType is the YAML library's hook for types that read their own
// nodes (api.QueryParam).
var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// checkSchema returns the problems of the YAML document doc against the
// schema of Config, in document order, each starting with the setting's
// YAML path and naming its line: keys that name no setting (with the
// nearest known setting), keys set twice, and values the setting cannot
// hold. It reads positions from the nodes, so nothing depends on the
// wording of the library's errors; a value is tried against its Go type
// by decoding that node alone with the library, so what it accepts is
// what decoding accepts.
//
// It runs on every valid file too, so it allocates only for problems: the
// path is a stack of segments made into text when a problem needs it.
func checkSchema(doc *yaml.Node) []string {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	c := schemaCheck{fields: make(map[reflect.Type]map[string]reflect.Type)}
	c.walk(doc.Content[0], configType)
	return c.problems
}

type schemaCheck struct {
	problems []string
	path     []pathSegment                            // from the document's root to the node being checked
	fields   map[reflect.Type]map[string]reflect.Type // yamlFields, once per struct type
	anchored map[anchorUse]bool                       // anchored nodes checked, made on the first
}

// anchorUse is an anchored node checked as a value of a type: an alias to
// it is checked again only where it stands for another type.
type anchorUse struct {
	node *yaml.Node
	t    reflect.Type
}

// pathSegment is a mapping key (name) or a list index (index >= 0).
type pathSegment struct {
	name  string
	index int
}

func (c *schemaCheck) pathString() string {
	var b strings.Builder
	for _, s := range c.path {
		switch {
		case s.index >= 0:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
		case b.Len() > 0:
			b.WriteByte('.')
			fallthrough
		default:
			b.WriteString(s.name)
		}
	}
	return b.String()
}

// add reports a problem with the node at the current path.
func (c *schemaCheck) add(node *yaml.Node, format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf("%s: %s (line %d)", c.pathString(), fmt.Sprintf(format, args...), node.Line))
}

// walk checks node, which decodes into a value of type t at c.path.
func (c *schemaCheck) walk(node *yaml.Node, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if node.Kind == yaml.AliasNode {
		if node.Alias != nil {
			c.walk(node.Alias, t) // as decoding reads it: the anchored node in this place
		}
		return
	}
	if node.Anchor != "" {
		use := anchorUse{node, t}
		if c.anchored[use] {
			return // checked as this type already (and an alias cannot loop)
		}
		if c.anchored == nil {
			c.anchored = make(map[anchorUse]bool)
		}
		c.anchored[use] = true
	}
	if node.Kind == yaml.ScalarNode && node.Tag == "!!null" {
		return // null keeps the value
	}
	switch {
	case t.Kind() == reflect.Struct && t != timeType && node.Kind == yaml.MappingNode:
		c.merged(node, t)
		c.structFields(node, t)
	case reflect.PointerTo(t).Implements(unmarshalerType):
		// A type that reads its own nodes: as decoding would.
		if err := node.Decode(reflect.New(t).Interface()); err != nil {
			c.problems = append(c.problems, c.pathString()+": "+err.Error())
		}
	case t.Kind() == reflect.Map && node.Kind == yaml.MappingNode:
		c.merged(node, t)
		seen := seenKeys(node)
		for i := 0; i+1 < len(node.Content); i += 2 {
			if k := node.Content[i]; c.keyOK(node, i, seen) {
				c.path = append(c.path, pathSegment{name: k.Value, index: -1})
				c.walk(node.Content[i+1], t.Elem())
				c.path = c.path[:len(c.path)-1]
			}
		}
	case t.Kind() == reflect.Slice && node.Kind == yaml.SequenceNode:
		for i, item := range node.Content {
			c.path = append(c.path, pathSegment{index: i})
			c.walk(item, t.Elem())
			c.path = c.path[:len(c.path)-1]
		}
	case node.Kind == yaml.MappingNode, node.Kind == yaml.SequenceNode, t.Kind() == reflect.Struct && t != timeType,
		t.Kind() == reflect.Map, t.Kind() == reflect.Slice:
		c.add(node, "want %s, got %s", typeWords(t), nodeWords(node))
	case t.Kind() == reflect.String:
		// Every scalar reads as a string.
	default:
		if err := node.Decode(reflect.New(t).Interface()); err != nil {
			c.add(node, "want %s, got %s", typeWords(t), nodeWords(node))
		}
	}
}

// structFields checks the keys and values of a mapping node that decodes
// into the struct type t.
func (c *schemaCheck) structFields(node *yaml.Node, t reflect.Type) {
	fields, ok := c.fields[t]
	if !ok {
		fields = yamlFields(t)
		c.fields[t] = fields
	}
	seen := seenKeys(node)
	for i := 0; i+1 < len(node.Content); i += 2 {
		k := node.Content[i]
		if !c.keyOK(node, i, seen) {
			continue
		}
		ft, known := fields[k.Value]
		if !known {
			parent := c.pathString()
			msg := fmt.Sprintf("%s: unknown setting (line %d)", join(parent, k.Value), k.Line)
			if s := suggest(k.Value, parent, fields); s != "" {
				msg += "; did you mean " + s + "?"
			}
			c.problems = append(c.problems, msg)
			continue
		}
		c.path = append(c.path, pathSegment{name: k.Value, index: -1})
		c.walk(node.Content[i+1], ft)
		c.path = c.path[:len(c.path)-1]
	}
}

// keyOK reports whether the i-th entry of a mapping node is to be
// checked as a setting: not a merge key (<<:, see merged), and not a key
// set before in the mapping, which it reports (the library refuses it
// too).
// A mapping of more keys than smallMapping remembers them in seen, the
// first line of each; a smaller one is searched (no allocation).
func (c *schemaCheck) keyOK(node *yaml.Node, i int, seen map[string]int) bool {
	k := node.Content[i]
	if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
		return false // see merged
	}
	first := 0
	if seen != nil {
		if line, dup := seen[k.Value]; dup {
			first = line
		} else {
			seen[k.Value] = k.Line
		}
	} else {
		for j := 0; j < i && first == 0; j += 2 {
			if prev := node.Content[j]; prev.Value == k.Value && prev.Tag != "!!merge" {
				first = prev.Line
			}
		}
	}
	if first == 0 {
		return true
	}
	c.problems = append(c.problems, fmt.Sprintf("%s: set twice, on lines %d and %d", join(c.pathString(), k.Value), first, k.Line))
	return false
}

const smallMapping = 16

// seenKeys returns the map keyOK needs for node: nil for a small one.
func seenKeys(node *yaml.Node) map[string]int {
	if len(node.Content)/2 <= smallMapping {
		return nil
	}
	return make(map[string]int, len(node.Content)/2)
}

// merged checks the mappings a mapping node of type t merges in with <<:
// (one, or a list of them), as part of a value of type t.
func (c *schemaCheck) merged(node *yaml.Node, t reflect.Type) {
	for i := 0; i+1 < len(node.Content); i += 2 {
		if k := node.Content[i]; k.Kind != yaml.ScalarNode || k.Tag != "!!merge" {
			continue
		}
		v := node.Content[i+1]
		if v.Kind == yaml.SequenceNode {
			for _, m := range v.Content {
				c.walk(m, t)
			}
			continue
		}
		c.walk(v, t)
	}
}

// nodeWords says in words what a node holds: a mapping, a list, or the
// scalar itself in backquotes.
func nodeWords(node *yaml.Node) string {
	switch node.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "`" + node.Value + "`"
}
