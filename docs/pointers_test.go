package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// pointerFiles are the files outside Markdown whose pointers into the
// repository are checked, relative to this directory: everything in
// deploy/ but Go tests (the chart's NOTES.txt and values, the systemd
// unit's Documentation=, the compose files' comments, the alert rules),
// the release files, and the comments of config.example.yaml
// (commentsOnly).
func pointerFiles(t *testing.T) (files []string, commentsOnly map[string]bool) {
	t.Helper()
	err := filepath.WalkDir("../deploy", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
			return err
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../Dockerfile", "../.goreleaser.yaml", "../.ko.yaml", "../config.example.yaml")
	return files, map[string]bool{"../config.example.yaml": true}
}

// TestPointers: every pointer into the repository written in deploy/,
// the release files and config.example.yaml's comments leads somewhere:
// a repository path (docs/x.md, deploy/..., README.md) exists, a heading
// named after a Markdown file (docs/x.md "Heading", README "Heading") is
// one of its headings, and a link to this repository on GitHub
// (https://github.com/trendgate/trendgate/blob/main/PATH#anchor, or the
// repository itself, which is README.md) names a file that exists and a
// heading it has. Issue 42: NOTES.txt and the systemd unit pointed at
// README sections that no longer existed.
func TestPointers(t *testing.T) {
	files, commentsOnly := pointerFiles(t)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(src)
		if commentsOnly[f] {
			text = comments(text)
		}
		for _, problem := range brokenPointers(f, text, "..", readFile) {
			t.Errorf("%s", problem)
		}
	}
}

// TestBrokenPointersFindsEach is a check of the checker: each kind of
// broken pointer is reported, and good ones, paths outside the repository
// and other sites' URLs are not.
func TestBrokenPointersFindsEach(t *testing.T) {
	files := map[string]string{
		"root/README.md":    "# trendgate\n\n## Running it\n",
		"root/docs/a.md":    "# A\n\n## Sizing, and memory\n",
		"root/deploy/x.yml": "",
	}
	read := func(path string) ([]byte, error) {
		if s, ok := files[filepath.ToSlash(path)]; ok {
			return []byte(s), nil
		}
		if filepath.ToSlash(path) == "root/docs" {
			return nil, nil
		}
		return nil, os.ErrNotExist
	}
	src := strings.Join([]string{
		`# ok: docs/a.md, docs/a.md "Sizing, and memory", README "Running it", deploy/x.yml, /etc/trendgate/config.yaml`,
		`# ok: https://github.com/trendgate/trendgate#running-it https://github.com/trendgate/trendgate/blob/main/docs/a.md#sizing-and-memory https://example.com/docs/b.md`,
		`# gone: docs/b.md deploy/y.yml`,
		`# no heading: docs/a.md "Sizing" README "Metrics"`,
		`Documentation=https://github.com/trendgate/trendgate#operating-it https://github.com/trendgate/trendgate/blob/main/docs/c.md`,
	}, "\n")
	got := brokenPointers("f", src, "root", read)
	want := []string{
		"f:3: docs/b.md: " + os.ErrNotExist.Error(),
		"f:3: deploy/y.yml: " + os.ErrNotExist.Error(),
		`f:4: docs/a.md "Sizing": no such heading`,
		`f:4: README "Metrics": no such heading`,
		"f:5: https://github.com/trendgate/trendgate#operating-it: no such heading",
		"f:5: https://github.com/trendgate/trendgate/blob/main/docs/c.md: " + os.ErrNotExist.Error(),
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q;\nwant %q", got, want)
	}
}

var (
	// repoURL matches a link to this repository on GitHub: the file
	// (group 1, empty for the repository's page) and the anchor (group 2).
	repoURL = regexp.MustCompile(`https://github\.com/trendgate/trendgate(?:/blob/main/([^\s#"')>]+))?(?:#([A-Za-z0-9_-]+))?`)
	// anyURL matches any URL, whose path is not a repository path.
	anyURL = regexp.MustCompile(`[a-z]+://[^\s"')>]+`)
	// headingRef matches a Markdown file (or README) followed by a quoted
	// heading: docs/operations.md "Sizing".
	headingRef = regexp.MustCompile(`(README|[A-Za-z0-9_./-]+\.md) "([^"]+)"`)
	// repoPath matches a path into the repository, not inside another path
	// (/etc/trendgate/config.yaml is not config/...).
	repoPath = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])((?:docs|deploy|bench|cmd|internal)/[A-Za-z0-9_./-]*[A-Za-z0-9_]|README\.md|CHANGELOG\.md|config\.example\.yaml)`)
)

// brokenPointers returns one line per pointer in src (the text of file)
// that leads nowhere in the repository at root, read through read.
func brokenPointers(file, src, root string, read func(string) ([]byte, error)) []string {
	var problems []string
	report := func(n int, what string, err error) {
		problems = append(problems, fmt.Sprintf("%s:%d: %s: %v", file, n, what, err))
	}
	heading := func(path, anchor string) error {
		text, err := read(filepath.Join(root, path))
		if err != nil {
			if os.IsNotExist(err) {
				return os.ErrNotExist
			}
			return err
		}
		if anchor != "" && strings.HasSuffix(path, ".md") && !slices.Contains(headingAnchors(string(text)), anchor) {
			return fmt.Errorf("no such heading")
		}
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		for _, m := range repoURL.FindAllStringSubmatch(line, -1) {
			path := m[1]
			if path == "" {
				path = "README.md"
			}
			if err := heading(path, m[2]); err != nil {
				report(n, m[0], err)
			}
		}
		line = anyURL.ReplaceAllString(line, "")
		for _, m := range headingRef.FindAllStringSubmatch(line, -1) {
			path := m[1]
			if path == "README" {
				path = "README.md"
			}
			if err := heading(path, headingAnchors("# " + m[2])[0]); err != nil {
				report(n, m[0], err)
			}
		}
		for _, m := range repoPath.FindAllStringSubmatch(line, -1) {
			if err := heading(strings.TrimSuffix(m[1], "."), ""); err != nil {
				report(n, m[1], err)
			}
		}
	}
	return problems
}

// comments returns the comments of a YAML text (what follows a # that
// starts a line or follows a space), one per line, so that line numbers
// stay right.
func comments(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, "#"); i == 0 || i > 0 && strings.Contains(line[:i+1], " #") {
			b.WriteString(line[i:])
		}
		b.WriteByte('\n')
	}
	return b.String()
}
