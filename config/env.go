package config

import (
	"bytes"
	"fmt"
	"strings"
)

// expand replaces every ${NAME} in data with lookup(NAME), and every $${
// with a literal ${. Lines whose first non-blank character is '#' are
// comments and are copied unchanged, so a commented-out setting never needs
// its variable. A nil lookup treats every variable as unset.
//
// It returns the expanded text and one problem per unset variable or
// malformed reference, each naming the line. A value is inserted as is and
// never appears in a problem; a value holding a line break is refused
// because it would change the YAML structure around it. Problems leave the
// reference replaced by nothing so that decoding can still report its own
// problems.
func expand(data []byte, lookup func(string) (string, bool)) ([]byte, []string) {
	if bytes.IndexByte(data, '$') < 0 {
		return data, nil
	}
	var out bytes.Buffer
	out.Grow(len(data))
	var problems []string
	for n, line := range bytes.SplitAfter(data, []byte("\n")) {
		lineNo := n + 1
		if isCommentLine(line) {
			out.Write(line)
			continue
		}
		for i := 0; i < len(line); {
			c := line[i]
			switch {
			case c != '$':
				out.WriteByte(c)
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
				case strings.ContainsAny(value, "\r\n"):
					problems = append(problems, fmt.Sprintf("line %d: environment variable %s holds a line break, which would change the YAML structure", lineNo, name))
				default:
					out.WriteString(value)
				}
			default:
				out.WriteByte(c)
				i++
			}
		}
	}
	return out.Bytes(), problems
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
