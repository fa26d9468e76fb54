package breakerstate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestBreakerLockTakenOnlyByWriteAndLook keeps every critical section of a
// breaker inside write (which publishes the fast mirror before unlocking)
// or look (which changes nothing): a section that locked mu by hand could
// change the state and leave the lock-free mirror behind.
func TestBreakerLockTakenOnlyByWriteAndLook(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || fn.Name.Name == "write" || fn.Name.Name == "look" {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.SelectorExpr)
				if !ok || (call.Sel.Name != "Lock" && call.Sel.Name != "Unlock") {
					return true
				}
				if mu, ok := call.X.(*ast.SelectorExpr); ok && mu.Sel.Name == "mu" {
					t.Errorf("%s: %s takes a breaker's mu directly; use write or look", fset.Position(call.Pos()), fn.Name.Name)
				}
				return true
			})
		}
	}
}
