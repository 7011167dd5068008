package docs

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docMention matches a document named in a comment of a YAML file, such as
// docs/restarts.md or docs/routes.md#a-route.
var docMention = regexp.MustCompile(`[A-Za-z0-9_./-]+\.md(#[A-Za-z0-9_-]+)?`)

// TestExampleConfigLinks: every document the comments of
// config.example.yaml point at exists, with the heading named.
func TestExampleConfigLinks(t *testing.T) {
	const doc = "../config.example.yaml"
	src, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range brokenMentions(doc, string(src), readFile) {
		t.Errorf("%s", problem)
	}
}

// brokenMentions returns one line per document named in the comments of
// the YAML text src (the file doc) that leads nowhere, read through read.
func brokenMentions(doc, src string, read func(string) ([]byte, error)) []string {
	var problems []string
	for n, line := range strings.Split(src, "\n") {
		_, comment, ok := strings.Cut(line, "#")
		if !ok {
			continue
		}
		for _, target := range docMention.FindAllString(comment, -1) {
			if err := checkTarget(doc, src, target, read); err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %v", doc, n+1, target, err))
			}
		}
	}
	return problems
}

// TestBrokenMentionsFindsEach is a check of the checker: a missing
// document and a missing heading are reported; a good mention and text
// outside comments are not.
func TestBrokenMentionsFindsEach(t *testing.T) {
	files := map[string]string{"docs/a.md": "# A\n\n## Sizing\n"}
	read := func(path string) ([]byte, error) {
		if s, ok := files[path]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	src := strings.Join([]string{
		"# see docs/a.md and docs/a.md#sizing",
		"key: docs/gone.md # docs/b.md",
		"# docs/a.md#nope",
	}, "\n")
	got := brokenMentions("example.yaml", src, read)
	want := []string{
		"example.yaml:2: docs/b.md: " + os.ErrNotExist.Error(),
		"example.yaml:3: docs/a.md#nope: no such heading",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q;\nwant %q", got, want)
	}
}
