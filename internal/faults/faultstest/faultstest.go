// Package faultstest checks, in a package's tests, that every fault it
// declares is registered with faults.Number: a fault left out of the
// registry could share a number with another unnoticed.
package faultstest

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"slices"
	"strings"
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

// AllGuarded fails t for each fault check in the current directory's
// production files (no _test.go, no file built only with -tags
// ration_faults) that a normal build keeps: a comparison (== or !=) or a
// switch on a fault field (x.fault) or a fault parameter (fault) that is
// neither the right operand of "faultsBuilt && ..." nor inside an "if
// faultsBuilt" block. faultsBuilt is the package's build-tagged constant,
// false in a normal build, so the compiler removes every guarded branch.
// It returns the unguarded checks' positions.
func AllGuarded(t *testing.T) []string {
	t.Helper()
	bad := Unguarded(t, ".")
	for _, b := range bad {
		t.Errorf("%s: a fault check a normal build keeps: write it faultsBuilt && ... (fault.go)", b)
	}
	return bad
}

// Unguarded lists the positions of dir's unguarded fault checks (see
// AllGuarded).
func Unguarded(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			if faultsOnly(f) {
				continue
			}
			var stack []ast.Node
			ast.Inspect(f, func(n ast.Node) bool {
				if n == nil {
					stack = stack[:len(stack)-1]
					return true
				}
				var checked ast.Expr
				switch x := n.(type) {
				case *ast.BinaryExpr:
					if (x.Op == token.EQL || x.Op == token.NEQ) && (isFault(x.X) || isFault(x.Y)) {
						checked = x
					}
				case *ast.SwitchStmt:
					if x.Tag != nil && isFault(x.Tag) {
						checked = x.Tag
					}
				}
				if checked != nil && !guarded(stack, n) {
					bad = append(bad, fset.Position(checked.Pos()).String())
				}
				stack = append(stack, n)
				return true
			})
		}
	}
	return bad
}

// faultsOnly: the file is built only with -tags ration_faults.
func faultsOnly(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if strings.HasPrefix(c.Text, "//go:build ") {
				e, err := constraint.Parse(c.Text)
				return err == nil && !e.Eval(func(tag string) bool { return tag != "ration_faults" })
			}
		}
	}
	return false
}

// isFault: x.fault or a variable named fault.
func isFault(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.SelectorExpr:
		return x.Sel.Name == "fault"
	case *ast.Ident:
		return x.Name == "fault"
	}
	return false
}

// guarded: n is the right side of a "faultsBuilt && ..." (directly or
// through further &&), or inside an "if faultsBuilt" block.
func guarded(stack []ast.Node, n ast.Node) bool {
	child := n
	for i := len(stack) - 1; i >= 0; i-- {
		switch p := stack[i].(type) {
		case *ast.BinaryExpr:
			if p.Op == token.LAND && p.Y == child && mentionsFaultsBuilt(p.X) {
				return true
			}
		case *ast.IfStmt:
			if p.Body == child && isIdent(p.Cond, "faultsBuilt") {
				return true
			}
		}
		child = stack[i]
	}
	return false
}

// mentionsFaultsBuilt: e is faultsBuilt or a chain of && that starts with it.
func mentionsFaultsBuilt(e ast.Expr) bool {
	if isIdent(e, "faultsBuilt") {
		return true
	}
	b, ok := e.(*ast.BinaryExpr)
	return ok && b.Op == token.LAND && mentionsFaultsBuilt(b.X)
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// Use turns f on for the rest of t (a negative control) and every fault
// off when t ends. Faults are process-wide: a test that uses one must not
// run in parallel with any other.
func Use(t testing.TB, f faults.Fault) {
	t.Helper()
	if err := faults.Set(string(f)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = faults.Set() })
}

// Later is Use for a control that breaks the rule only part way through
// t: the function it returns turns f on and returns the one that turns it
// off again. Every fault is off when t ends.
func Later(t testing.TB, f faults.Fault) func() func() {
	t.Cleanup(func() { _ = faults.Set() })
	return func() func() {
		t.Helper()
		if err := faults.Set(string(f)); err != nil {
			t.Fatal(err)
		}
		return func() { _ = faults.Set() }
	}
}
