package config

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// syntaxProblems describes a YAML syntax error err found in data, with the
// line of the mistake. Tabs in indentation, which YAML forbids, are named
// as such, each on its line.
func syntaxProblems(data []byte, err error) []string {
	src := newSourceLines(data)
	var problems []string
	tabs := make(map[int]bool)
	for i := range src.count() {
		line := src.line(i + 1)
		indent := line[:len(line)-len(bytes.TrimLeft(line, " \t"))]
		rest := bytes.TrimSpace(line)
		if bytes.IndexByte(indent, '\t') >= 0 && len(rest) > 0 && rest[0] != '#' {
			tabs[i+1] = true
			problems = append(problems, fmt.Sprintf("line %d: a tab character; YAML indents with spaces", i+1))
		}
	}
	reported, what := splitSyntaxError(err)
	if reported == 0 {
		return append(problems, what)
	}
	line := src.mistakeLine(reported, what)
	switch {
	case tabs[line], len(tabs) > 0 && (strings.Contains(what, "tab character") || strings.Contains(what, "cannot start any token")):
		return problems // the tab is the mistake, and is named already
	case line >= 1 && line <= src.count() && bytes.IndexByte(src.line(line), '\t') >= 0 && strings.Contains(what, "cannot start any token"):
		return append(problems, fmt.Sprintf("line %d: a tab character; YAML separates with spaces", line))
	}
	return append(problems, fmt.Sprintf("line %d: %s", line, what))
}

// splitSyntaxError splits a syntax error of the YAML library into the line
// it names and what it says. The library gives a syntax error's position
// only in its text ("yaml: line 41: did not find expected key"); line is 0
// when the text names none.
func splitSyntaxError(err error) (line int, what string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	head, rest, found := strings.Cut(msg, ": ")
	num, isLine := strings.CutPrefix(head, "line ")
	if !found || !isLine {
		return 0, msg
	}
	n, perr := strconv.Atoi(num)
	if perr != nil || n < 1 {
		return 0, msg
	}
	return n, rest
}

// sourceLines is a YAML text and where each of its lines starts, so that a
// prefix or a suffix of whole lines is a slice of the text, not a copy.
type sourceLines struct {
	data  []byte
	start []int // start[i] is the offset of line i+1; a last, empty line when data ends in "\n"
}

func newSourceLines(data []byte) sourceLines {
	start := []int{0}
	for i, b := range data {
		if b == '\n' {
			start = append(start, i+1)
		}
	}
	return sourceLines{data: data, start: start}
}

// count is the number of lines, counting the empty one after a final "\n".
func (s sourceLines) count() int { return len(s.start) }

// line returns line n (from 1) with its "\n".
func (s sourceLines) line(n int) []byte { return s.data[s.start[n-1]:s.end(n)] }

// end is the offset just past line n (from 1).
func (s sourceLines) end(n int) int {
	if n >= len(s.start) {
		return len(s.data)
	}
	return s.start[n]
}

// parseProblem parses text alone and returns what the YAML library says of
// its syntax, split as splitSyntaxError does; ok is false when it parses.
func parseProblem(text []byte) (line int, what string, ok bool) {
	var node yaml.Node
	err := yaml.Unmarshal(text, &node)
	if err == nil {
		return 0, "", false
	}
	line, what = splitSyntaxError(err)
	return line, what, true
}

// fails reports whether lines from to to (counted from 1), parsed alone,
// fail with the problem what.
func (s sourceLines) fails(from, to int, what string) bool {
	_, got, failed := parseProblem(s.data[s.start[from-1]:s.end(to)])
	return failed && got == what
}

// mistakeLine finds the line of the syntax mistake about which the YAML
// library said what and named the line reported.
//
// The library names the line where the enclosing block began rather than
// where the mistake is ("line 41: did not find expected '-' indicator" for
// a key indented one space short on line 49), and it counts that line from
// 0 for a parser's problem but from 1 for a scanner's. The mistake is on
// the first line n at or after reported such that lines 1 to n alone fail
// with the same problem, since a document cut at any line before the
// mistake still parses. Trying each n in turn costs the square of the
// file's length, which a large keys list makes minutes; instead:
//
//   - A scanner's problem (a tab, an unterminated quote) is named where it
//     is: lines 1 to reported already fail.
//   - Otherwise the block began on the line after reported, and that line
//     is the mistake when lines 1 to it fail (it does not fit its parent).
//   - Otherwise the block is parsed alone, from its first line to the end.
//     It is then the first thing in its text, and for a problem in a
//     text's first block the library names the line it stopped on
//     (counted from 0 within that text). The block's lines parse alone as
//     they do in the file, since the lines before it parse and it fits its
//     parent, so the answer is the first n at which the block's lines up
//     to n fail: nearly always the line the library stopped on (two more
//     parses of the block say so), else one found near it by stepping
//     back or forward by 1, 2, 4, ... lines and halving.
//   - When the block alone does not fail the same way, the same stepping
//     runs on whole prefixes from reported on.
//
// So a mistake near the end of a large file is placed in three parses of
// the file besides the one that found it (BenchmarkSyntaxMistake), and
// TestMistakeLineAgreesWithScan holds the answer to the line-by-line
// search's.
func (s sourceLines) mistakeLine(reported int, what string) int {
	n := s.count()
	if reported >= n || s.fails(1, reported, what) {
		return reported
	}
	from := reported + 1
	if s.fails(1, from, what) {
		return from // the block's first line is the mistake, as where it sits in its parent
	}
	line, got, failed := parseProblem(s.data[s.start[from-1]:])
	if !failed || got != what {
		return s.firstFailingAfter(1, reported, n, what)
	}
	// line counts from 0 within the block's text; the library names none
	// when it stopped on the block's first line.
	stop := min(reported+line+1, n)
	if s.fails(from, stop, what) {
		return s.firstFailingBefore(from, reported, stop, what)
	}
	return s.firstFailingAfter(from, stop, n, what)
}

// firstFailingBefore returns the first n in (known, failing] at which
// lines from to n fail with the problem what, given that lines from to
// failing do and lines from to known do not. It steps back from failing
// by 1, 2, 4, ... lines, then halves the gap left: an answer at failing
// costs one parse, one k lines before it about 2·log2(k).
func (s sourceLines) firstFailingBefore(from, known, failing int, what string) int {
	for step := 1; failing-step > known; step *= 2 {
		if !s.fails(from, failing-step, what) {
			known = failing - step
			break
		}
		failing -= step
	}
	return s.halve(from, known, failing, what)
}

// firstFailingAfter is firstFailingBefore stepping forward from known, for
// an answer expected near it.
func (s sourceLines) firstFailingAfter(from, known, failing int, what string) int {
	for step := 1; known+step < failing; step *= 2 {
		if s.fails(from, known+step, what) {
			failing = known + step
			break
		}
		known += step
	}
	return s.halve(from, known, failing, what)
}

// halve returns the first n in (known, failing] at which lines from to n
// fail with the problem what, by halving the gap.
func (s sourceLines) halve(from, known, failing int, what string) int {
	for failing-known > 1 {
		mid := known + (failing-known)/2
		if s.fails(from, mid, what) {
			failing = mid
		} else {
			known = mid
		}
	}
	return failing
}
