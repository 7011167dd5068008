package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestCodesLiveHere: every error code the gateway answers with is one of
// the constants of errors.go, and no other file of the module writes one
// as a literal (in httperr.New, bad or an httperr.Error's Code), so that a
// code has one definition and one meaning. The demo upstream's errors are
// the upstream's, not the gateway's, and are left out.
func TestCodesLiveHere(t *testing.T) {
	fset := token.NewFileSet()
	var found []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "demo", "bench", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.ToSlash(path) == "../api/errors.go" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var lit ast.Expr
			switch n := n.(type) {
			case *ast.CallExpr:
				switch callee(n.Fun) {
				case "httperr.New":
					if len(n.Args) > 1 {
						lit = n.Args[1]
					}
				case "bad": // api's own helper for 400s
					if strings.HasPrefix(filepath.ToSlash(path), "../api/") && len(n.Args) > 0 {
						lit = n.Args[0]
					}
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Code" {
					lit = n.Value
				}
			}
			if bl, ok := lit.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				found = append(found, fset.Position(bl.Pos()).String()+": "+bl.Value)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("an error code written as a literal outside api/errors.go: %s", f)
	}
}

// callee names a call's function as written: "bad", "httperr.New".
func callee(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok {
			return x.Name + "." + e.Sel.Name
		}
	}
	return ""
}
