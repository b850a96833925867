package rollout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"
)

// TestEventKindsListsEveryKind: EventKinds, which consumers choose from
// (the controller's --webhook-events), names every EventKind constant of
// events.go, so a new kind cannot be left out of it.
func TestEventKindsListsEveryKind(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "events.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []EventKind
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "EventKind" {
			return true
		}
		for _, v := range vs.Values {
			if lit, ok := v.(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				declared = append(declared, EventKind(s))
			}
		}
		return true
	})
	if len(declared) == 0 {
		t.Fatal("no EventKind constants found in events.go")
	}
	for _, k := range declared {
		if !slices.Contains(EventKinds, k) {
			t.Errorf("EventKinds lacks %q", k)
		}
	}
	if len(EventKinds) != len(declared) {
		t.Errorf("EventKinds has %d kinds, events.go declares %d", len(EventKinds), len(declared))
	}
}
