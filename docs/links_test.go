// Package docs holds the repository's documentation; its tests check that
// the relative links in README.md and the documents here lead somewhere,
// and so do the pointers into the repository written in deploy/, the
// release files and config.example.yaml's comments (pointers_test.go).
package docs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// documents are the Markdown files whose links are checked, relative to
// this directory.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md", "../bench/README.md"}, docs...)
}

// TestRelativeLinks: every relative link (and image) in README.md,
// bench/README.md and docs/*.md names a file or directory that exists,
// and a link to a heading of a Markdown file (file.md#heading, or
// #heading in the same file) names a heading that file has.
func TestRelativeLinks(t *testing.T) {
	for _, doc := range documents(t) {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, problem := range brokenLinks(doc, string(src), readFile) {
			t.Errorf("%s", problem)
		}
	}
}

// TestBrokenLinksFindsEach is a check of the checker: a link to a missing
// file, to a missing heading and to a missing heading of another file are
// each reported, and links in code, external links and good links are not.
func TestBrokenLinksFindsEach(t *testing.T) {
	files := map[string]string{
		"a.md": "# A\n\n## Sizing, and memory\n\n## Sizing, and memory\n",
	}
	read := func(path string) ([]byte, error) {
		if s, ok := files[filepath.ToSlash(path)]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	doc := strings.Join([]string{
		"# Doc",
		"## The HTTP/2 lane",
		"[ok](a.md) [ok](a.md#sizing-and-memory-1) [ok](#the-http2-lane) [ok](https://example.com/x.md)",
		"[gone](b.md) [no heading](a.md#sizing) [no local heading](#nope)",
		"`[in code](c.md)`",
		"```",
		"[in a block](d.md)",
		"```",
		"![image](e.png)",
	}, "\n")
	got := brokenLinks("doc.md", doc, read)
	want := []string{
		"doc.md:4: b.md: " + os.ErrNotExist.Error(),
		"doc.md:4: a.md#sizing: no such heading",
		"doc.md:4: #nope: no such heading",
		"doc.md:9: e.png: " + os.ErrNotExist.Error(),
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q;\nwant %q", got, want)
	}
}

// readFile reads a file, or reports that a directory exists (nil bytes).
func readFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, nil
	}
	return os.ReadFile(path)
}

var (
	// inlineLink matches [text](target) and ![alt](target); the target
	// stops at white space (a title may follow) or the closing parenthesis.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)[^)]*\)`)
	// inlineCode matches a code span, whose brackets are not links.
	inlineCode = regexp.MustCompile("`[^`]*`")
	// scheme matches a target that is not relative: http:, mailto:, ...
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// brokenLinks returns one line per relative link in src (the document
// doc) that leads nowhere, read through read.
func brokenLinks(doc, src string, read func(string) ([]byte, error)) []string {
	var problems []string
	inBlock := false
	sc := bufio.NewScanner(strings.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			continue
		}
		line = inlineCode.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			target := m[1]
			if scheme.MatchString(target) {
				continue
			}
			if err := checkTarget(doc, src, target, read); err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %v", doc, n, target, err))
			}
		}
	}
	return problems
}

// checkTarget reports why target, a link in doc (whose text is src), does
// not resolve.
func checkTarget(doc, src, target string, read func(string) ([]byte, error)) error {
	file, anchor, _ := strings.Cut(target, "#")
	text := []byte(src)
	if file != "" {
		var err error
		if text, err = read(filepath.Join(filepath.Dir(doc), file)); err != nil {
			if os.IsNotExist(err) {
				return os.ErrNotExist
			}
			return err
		}
	}
	if anchor == "" || !strings.HasSuffix(file, ".md") && file != "" {
		return nil
	}
	if !slices.Contains(headingAnchors(string(text)), anchor) {
		return fmt.Errorf("no such heading")
	}
	return nil
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: lower case, punctuation dropped, spaces as hyphens, and
// -1, -2, ... after a repeated one.
func headingAnchors(text string) []string {
	var anchors []string
	seen := map[string]int{}
	inBlock := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		heading, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if inBlock || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if k := seen[a]; k > 0 {
			anchors = append(anchors, fmt.Sprintf("%s-%d", a, k))
		} else {
			anchors = append(anchors, a)
		}
		seen[a]++
	}
	return anchors
}
