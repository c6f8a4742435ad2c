package consumer_test

import (
	"bytes"
	"flag"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateAPI = flag.Bool("update-api", false, "rewrite testdata/api.txt from the package's exported names")

// TestAPIListing fails when the package's exported surface (names,
// signatures, exported struct fields, constants) differs from
// testdata/api.txt: a change to the public API must be deliberate, made by
// running `go test ./consumer -run TestAPIListing -update-api` and
// committing the listing with it.
func TestAPIListing(t *testing.T) {
	t.Parallel()
	got := exportedAPI(t)
	path := filepath.Join("testdata", "api.txt")
	if *updateAPI {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("the exported API changed; if that is deliberate, run go test ./consumer -run TestAPIListing -update-api and commit testdata/api.txt.\ngot:\n%s\nwant:\n%s", got, want)
	}
}

// exportedAPI lists the package's exported declarations, one per line,
// sorted, without bodies or comments.
func exportedAPI(t *testing.T) string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, n, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	var lines []string
	show := func(n any) string {
		var b bytes.Buffer
		if err := printer.Fprint(&b, fset, n); err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(b.String()), " ")
	}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || d.Recv != nil && !exportedRecv(d.Recv) {
					continue
				}
				d.Body, d.Doc = nil, nil
				lines = append(lines, show(d))
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if st, ok := s.Type.(*ast.StructType); ok {
							st.Fields.List = slices.DeleteFunc(st.Fields.List, func(f *ast.Field) bool {
								return len(f.Names) == 0 || !f.Names[0].IsExported()
							})
							for _, f := range st.Fields.List {
								f.Doc, f.Comment = nil, nil
							}
						}
						s.Doc, s.Comment = nil, nil
						lines = append(lines, "type "+show(s))
					case *ast.ValueSpec:
						for i, n := range s.Names {
							if !n.IsExported() {
								continue
							}
							line := d.Tok.String() + " " + n.Name
							if s.Type != nil {
								line += " " + show(s.Type)
							}
							if i < len(s.Values) && d.Tok == token.CONST {
								line += " = " + show(s.Values[i])
							}
							lines = append(lines, line)
						}
					}
				}
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

func exportedRecv(fl *ast.FieldList) bool {
	typ := fl.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}
