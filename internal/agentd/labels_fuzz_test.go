package agentd

import (
	"strings"
	"testing"
)

// FuzzLabelsFile: whatever the labels file holds, parseLabelsFile returns
// an error or labels that all pass rollout's rules (no control
// characters, bounded keys and values, at most MaxLabels), and the labels
// it returns read back the same when written one per line.
func FuzzLabelsFile(f *testing.F) {
	for _, s := range []string{
		"env=prod\nrack=r12\n",
		"# comment\n\n  env = prod  \r\n",
		"env=prod\nenv=dev\n",
		"Env=prod\n",
		"env=a b\n",
		"env=\x1b[2J\n",
		"noequals\n",
		"=value\n",
		strings.Repeat("k=v\n", 40),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := parseLabelsFile(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("parsed labels fail validation: %v", err)
		}
		var b strings.Builder
		for k, v := range l {
			b.WriteString(k + "=" + v + "\n")
		}
		again, err := parseLabelsFile(strings.NewReader(b.String()))
		if err != nil || len(again) != len(l) {
			t.Fatalf("written back: %v, %d labels, want %d", err, len(again), len(l))
		}
		for k, v := range l {
			if again[k] != v {
				t.Fatalf("label %s: %q read back as %q", k, v, again[k])
			}
		}
	})
}
