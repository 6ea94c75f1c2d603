// Command codemetrics prints the size figures the code-health work is
// judged by, for the core module's shipped code (every .go file that is
// not a test and not generated, outside bench/, deploy/ and examples/):
// shipped lines, functions over 100 lines, and the exported identifiers
// of each package named on the command line.
//
//	cd bench && go run ./cmd/codemetrics -root .. lease fsm
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	root := flag.String("root", "..", "the core module's directory")
	limit := flag.Int("limit", 100, "report functions longer than this many lines")
	flag.Parse()
	if err := run(*root, *limit, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "codemetrics:", err)
		os.Exit(1)
	}
}

type longFunc struct {
	where string
	lines int
}

func shipped(root, path string) bool {
	rel, _ := filepath.Rel(root, path)
	first := strings.Split(filepath.ToSlash(rel), "/")[0]
	switch first {
	case "bench", "deploy", "examples", "jepsen-like-tests":
		return false
	}
	return strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") &&
		!strings.HasSuffix(path, ".pb.go")
}

func run(root string, limit int, pkgs []string) error {
	fset := token.NewFileSet()
	lines := 0
	var long []longFunc
	exported := map[string]map[string]bool{}
	for _, p := range pkgs {
		exported[p] = map[string]bool{}
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !shipped(root, path) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		lines += strings.Count(string(src), "\n")
		rel, _ := filepath.Rel(root, path)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if n > limit {
				name := fn.Name.Name
				if fn.Recv != nil && len(fn.Recv.List) > 0 {
					name = recvName(fn.Recv.List[0].Type) + "." + name
				}
				long = append(long, longFunc{fmt.Sprintf("%s %s", rel, name), n})
			}
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if set, ok := exported[dir]; ok {
			collectExported(f, set)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(long, func(i, j int) bool { return long[i].lines > long[j].lines })
	fmt.Printf("shipped lines: %d\n", lines)
	fmt.Printf("functions over %d lines: %d\n", limit, len(long))
	for _, l := range long {
		fmt.Printf("  %4d  %s\n", l.lines, l.where)
	}
	for _, p := range pkgs {
		top := 0
		for name := range exported[p] {
			if !strings.Contains(name, ".") {
				top++
			}
		}
		fmt.Printf("exported identifiers of %s: %d package-level, %d with methods and fields\n", p, top, len(exported[p]))
	}
	return nil
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// collectExported adds the package-level exported names, the exported
// methods (as Type.Method) and the exported fields of exported structs
// (as Type.Field).
func collectExported(f *ast.File, set map[string]bool) {
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv != nil && len(d.Recv.List) > 0 {
				r := recvName(d.Recv.List[0].Type)
				if ast.IsExported(r) {
					set[r+"."+d.Name.Name] = true
				}
				continue
			}
			set[d.Name.Name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch sp := s.(type) {
				case *ast.ValueSpec:
					for _, n := range sp.Names {
						if n.IsExported() {
							set[n.Name] = true
						}
					}
				case *ast.TypeSpec:
					if !sp.Name.IsExported() {
						continue
					}
					set[sp.Name.Name] = true
					if st, ok := sp.Type.(*ast.StructType); ok {
						for _, fld := range st.Fields.List {
							for _, n := range fld.Names {
								if n.IsExported() {
									set[sp.Name.Name+"."+n.Name] = true
								}
							}
						}
					}
				}
			}
		}
	}
}
