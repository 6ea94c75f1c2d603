// Package faultstest checks, in a package's tests, that every fault it
// declares is registered with faults.Number: a fault left out of the
// registry could share a number with another unnoticed.
package faultstest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"

	"github.com/ration-dev/ration/internal/faults"
)

// AllRegistered fails t for each constant or variable of type T declared
// in the Go files of the current directory (the package under test, its
// test files included) that faults.Numbers[T] does not name. typeName is
// T's name in that package ("fault", "SlotFault").
func AllRegistered[T ~uint8 | ~uint16 | ~uint32 | ~uint64](t *testing.T, typeName string) {
	t.Helper()
	declared := Declared(t, typeName)
	if len(declared) == 0 {
		t.Fatalf("no %s declared here: wrong type name?", typeName)
	}
	var names []string
	for _, name := range faults.Numbers[T]() {
		names = append(names, name)
	}
	for _, d := range declared {
		if !slices.Contains(names, d) {
			t.Errorf("%s %s is not registered: declare it through faults.Number", typeName, d)
		}
	}
}

// Declared lists the names of the constants and variables of type
// typeName declared in the current directory's Go files: those whose
// declaration names the type, those of an iota block after one that does,
// and variables set by a call whose first argument converts to the type
// (registerFault(fault(0x40), ...)).
func Declared(t *testing.T, typeName string) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || (gd.Tok != token.CONST && gd.Tok != token.VAR) {
					continue
				}
				out = append(out, declaredIn(gd, typeName)...)
			}
		}
	}
	return out
}

func declaredIn(gd *ast.GenDecl, typeName string) []string {
	var out []string
	inherited := false // a const block's spec without type or value repeats the last one
	for _, spec := range gd.Specs {
		vs := spec.(*ast.ValueSpec)
		is := false
		switch {
		case vs.Type != nil:
			is = isType(vs.Type, typeName)
		case len(vs.Values) == 0:
			is = gd.Tok == token.CONST && inherited
		default:
			is = mentionsConversion(vs.Values[0], typeName)
		}
		if gd.Tok == token.CONST && (vs.Type != nil || len(vs.Values) > 0) {
			inherited = is
		}
		if is {
			for _, n := range vs.Names {
				if n.Name != "_" {
					out = append(out, n.Name)
				}
			}
		}
	}
	return out
}

func isType(e ast.Expr, typeName string) bool {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name == typeName
	case *ast.SelectorExpr:
		return x.Sel.Name == typeName
	}
	return false
}

// mentionsConversion: the value is a conversion T(n), or a call whose
// first argument is one (registerFault(T(n), ...)).
func mentionsConversion(e ast.Expr, typeName string) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	if isType(call.Fun, typeName) {
		return true
	}
	return len(call.Args) > 0 && mentionsConversion(call.Args[0], typeName)
}
