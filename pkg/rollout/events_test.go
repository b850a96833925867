package rollout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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

// TestEventBounded: a reason of any length is cut to MaxEventReason bytes,
// on a character boundary, and a short one is kept as it is.
func TestEventBounded(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		cut          bool
	}{
		{"short", "canary failed", false},
		{"exactly the bound", strings.Repeat("a", MaxEventReason), false},
		{"ascii flood", strings.Repeat("a", 120<<10), true},
		{"multibyte at the cut", strings.Repeat("é", MaxEventReason), true},
		{"controls", strings.Repeat("\x1b[31m", 1000), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := newEvent("prod", EventHalt, StateActive, StateActive, tc.reason, time.Unix(0, 0))
			if len(ev.Reason) > MaxEventReason || !utf8.ValidString(ev.Reason) {
				t.Fatalf("reason of %d bytes (valid UTF-8 %t)", len(ev.Reason), utf8.ValidString(ev.Reason))
			}
			if got := ev.Reason != tc.reason; got != tc.cut {
				t.Errorf("cut %t, want %t", got, tc.cut)
			}
			if tc.cut && (!strings.HasSuffix(ev.Reason, "…") || !strings.HasPrefix(tc.reason, strings.TrimSuffix(ev.Reason, "…"))) {
				t.Errorf("cut reason %q… is not a prefix and an ellipsis", ev.Reason[:20])
			}
		})
	}
}
