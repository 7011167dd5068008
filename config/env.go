package config

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// expand replaces every ${NAME} in data with lookup(NAME), and every $${
// with a literal ${. Lines whose first non-blank character is '#' are
// comments and are copied unchanged, so a commented-out setting never needs
// its variable. A nil lookup treats every variable as unset.
//
// A value reaches its setting exactly as the variable holds it: inside a
// double- or single-quoted YAML string it is escaped for that string; as
// the whole of a plain (unquoted) value it is written plain when YAML would
// read it back unchanged, and double-quoted otherwise (a value starting
// with '!' or '&', holding " #" or ": ", or reading as null). Within a
// longer plain value, a variable whose value would change the YAML around
// it is a problem that asks for quotes. A value holding a line break is
// refused.
//
// It returns the expanded text, the values used (for redact), and one
// problem per unset variable, malformed reference or unsafe value, each
// naming the line and never the value. Problems leave the reference
// replaced by nothing so that decoding can still report its own problems.
func expand(data []byte, lookup func(string) (string, bool)) ([]byte, []envValue, []string) {
	if bytes.IndexByte(data, '$') < 0 {
		return data, nil, nil
	}
	var out bytes.Buffer
	out.Grow(len(data))
	var problems []string
	var used []envValue
	for n, line := range bytes.SplitAfter(data, []byte("\n")) {
		lineNo := n + 1
		if isCommentLine(line) {
			out.Write(line)
			continue
		}
		var q quoting
		for i := 0; i < len(line); {
			c := line[i]
			switch {
			case c != '$':
				out.WriteByte(c)
				q.step(line, i)
				i++
			case bytes.HasPrefix(line[i:], []byte("$${")):
				out.WriteString("${")
				i += 3
			case bytes.HasPrefix(line[i:], []byte("${")):
				end := bytes.IndexByte(line[i+2:], '}')
				if end < 0 {
					problems = append(problems, fmt.Sprintf("line %d: unterminated \"${\" (write \"$${\" for a literal \"${\")", lineNo))
					out.Write(line[i:])
					i = len(line)
					continue
				}
				name := string(line[i+2 : i+2+end])
				start := i
				i += 2 + end + 1
				if !validEnvName(name) {
					problems = append(problems, fmt.Sprintf("line %d: invalid variable name %q in \"${...}\" (letters, digits and _; write \"$${\" for a literal \"${\")", lineNo, name))
					continue
				}
				var value string
				var ok bool
				if lookup != nil {
					value, ok = lookup(name)
				}
				switch {
				case !ok:
					problems = append(problems, fmt.Sprintf("line %d: environment variable %s is not set", lineNo, name))
					continue
				case strings.ContainsAny(value, "\r\n"):
					problems = append(problems, fmt.Sprintf("line %d: environment variable %s holds a line break, which would change the YAML structure", lineNo, name))
					continue
				}
				text, ok := q.insert(value, standalone(line, start, i))
				if !ok {
					problems = append(problems, fmt.Sprintf("line %d: environment variable %s holds characters that would change the YAML around it; quote the whole value in the file, e.g. \"...${%s}...\"", lineNo, name, name))
					continue
				}
				out.WriteString(text)
				used = append(used, envValue{name: name, value: value})
			default:
				out.WriteByte(c)
				q.step(line, i)
				i++
			}
		}
	}
	return out.Bytes(), used, problems
}

// envValue is one variable's value as expand inserted it.
type envValue struct{ name, value string }

// redact replaces the values of vars in a problem with their ${NAME}, so
// that no error ever echoes a secret: everywhere for values of four bytes
// or more; and a `quoted` token of the problem (as YAML errors quote
// values, shortened to a prefix and "...") that is a variable's value or
// its prefix.
func redact(problem string, vars []envValue) string {
	for _, v := range vars {
		if len(v.value) >= 4 {
			problem = strings.ReplaceAll(problem, v.value, "${"+v.name+"}")
		}
	}
	var out strings.Builder
	for {
		i := strings.IndexByte(problem, '`')
		j := -1
		if i >= 0 {
			j = strings.IndexByte(problem[i+1:], '`')
		}
		if j < 0 {
			out.WriteString(problem)
			return out.String()
		}
		token := problem[i+1 : i+1+j]
		out.WriteString(problem[:i+1])
		out.WriteString(redactToken(token, vars))
		out.WriteByte('`')
		problem = problem[i+1+j+1:]
	}
}

// redactToken returns ${NAME} when token is the value of a variable in
// vars, or its prefix followed by "...", and token otherwise.
func redactToken(token string, vars []envValue) string {
	prefix, shortened := strings.CutSuffix(token, "...")
	for _, v := range vars {
		if v.value != "" && (token == v.value || shortened && prefix != "" && strings.HasPrefix(v.value, prefix)) {
			return "${" + v.name + "}"
		}
	}
	return token
}

// quoting tracks whether a position of a line is inside a quoted YAML
// string. It is a line-level approximation that is exact for the scalar
// values of a configuration file.
type quoting struct{ double, single, flow bool }

// step moves past line[i].
func (q *quoting) step(line []byte, i int) {
	switch c := line[i]; {
	case q.double:
		if c == '"' && !escaped(line, i) {
			q.double = false
		}
	case q.single:
		if c == '\'' {
			q.single = false // a doubled '' closes and reopens
		}
	case c == '"':
		q.double = true
	case c == '\'':
		q.single = true
	case c == '[' || c == '{':
		q.flow = true
	}
}

// escaped reports whether line[i] follows an odd number of backslashes.
func escaped(line []byte, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && line[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// insert returns value as it must be written at the current position to
// reach the setting unchanged; whole says the reference is the whole of a
// plain value. ok is false when no spelling can keep it unchanged there.
func (q *quoting) insert(value string, whole bool) (string, bool) {
	switch {
	case q.double:
		return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(value), true
	case q.single:
		return strings.ReplaceAll(value, "'", "''"), true
	case whole && !q.flow:
		if plainSafe(value) {
			return value, true
		}
		return strconv.Quote(value), true
	}
	return value, plainSafe(value) && !strings.ContainsAny(value, ",[]{}")
}

// plainSafe reports whether YAML reads value back unchanged as a plain
// scalar (or as the number or boolean it spells).
func plainSafe(value string) bool {
	if value == "" || value != strings.TrimSpace(value) {
		return false
	}
	if strings.ContainsRune("!&*|>'\"%@`#,[]{}?:-", rune(value[0])) {
		return false
	}
	switch value {
	case "~", "null", "Null", "NULL":
		return false
	}
	return !strings.Contains(value, " #") && !strings.Contains(value, ": ") && !strings.HasSuffix(value, ":")
}

// standalone reports whether the reference at line[start:end] is the whole
// of a plain value: after "key:" or "- ", followed by nothing but blanks
// or a comment.
func standalone(line []byte, start, end int) bool {
	before := bytes.TrimRight(line[:start], " \t")
	lead := bytes.TrimSpace(before)
	if !(bytes.HasSuffix(before, []byte(":")) || bytes.Equal(lead, []byte("-")) || len(lead) == 0) {
		return false
	}
	after := bytes.TrimLeft(line[end:], " \t")
	return len(bytes.TrimSpace(after)) == 0 || after[0] == '#'
}

// isCommentLine reports whether line's first non-blank character is '#'.
func isCommentLine(line []byte) bool {
	t := bytes.TrimLeft(line, " \t")
	return len(t) > 0 && t[0] == '#'
}

// validEnvName reports whether name is a portable environment variable name:
// a letter or underscore, then letters, digits or underscores.
func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
