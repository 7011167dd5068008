package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// outsideDocs are files that are not in the repository and that an
// earlier version's comments pointed at; a comment states the fact itself
// or points at a document in docs/ instead.
var outsideDocs = []string{"DESIGN" + ".md", "upstream-facts" + ".md"}

// TestNoCommentPointsOutside: no comment in a Go file of the repository
// names a document that is not in it.
func TestNoCommentPointsOutside(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, group := range f.Comments {
			for _, c := range group.List {
				for _, name := range outsideDocs {
					if strings.Contains(c.Text, name) {
						t.Errorf("%s: a comment names %s, which is not in the repository", fset.Position(c.Pos()), name)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestYAMLLibrary: the configuration and the documents the gateway reads
// are decoded with the maintained go.yaml.in/yaml/v3; the archived
// gopkg.in/yaml.v3 is not a direct requirement (a dependency may still
// need it, marked indirect).
func TestYAMLLibrary(t *testing.T) {
	const archived = "gopkg.in/yaml" + ".v3"
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(mod), "\n") {
		if strings.Contains(line, archived+" ") && !strings.Contains(line, "// indirect") {
			t.Errorf("go.mod:%d: %s is a direct requirement; use go.yaml.in/yaml/v3", i+1, archived)
		}
	}
	if !strings.Contains(string(mod), "go.yaml.in/yaml/v3 ") {
		t.Errorf("go.mod does not require go.yaml.in/yaml/v3")
	}
}
