package install_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// TestLoadJournal: a journal that is not what agentd writes is ErrCorrupt,
// never taken for "no install under way" (the host's state would be
// unknown), and a missing one is no journal.
func TestLoadJournal(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       error
	}{
		{"valid", `{"v":1,"step":"swap","target":"2.0.0","from":"1.0.0"}`, nil},
		{"first install", `{"v":1,"step":"health","target":"2.0.0"}`, nil},
		{"not json", `step: swap`, install.ErrCorrupt},
		{"empty", ``, install.ErrCorrupt},
		{"truncated", `{"v":1,"step":"sw`, install.ErrCorrupt},
		{"future version", `{"v":2,"step":"swap","target":"2.0.0"}`, install.ErrCorrupt},
		{"unknown step", `{"v":1,"step":"reticulate","target":"2.0.0"}`, install.ErrCorrupt},
		{"no target", `{"v":1,"step":"swap"}`, install.ErrCorrupt},
		{"target escapes", `{"v":1,"step":"swap","target":"../../etc"}`, install.ErrCorrupt},
		{"from escapes", `{"v":1,"step":"swap","target":"2.0.0","from":"../x"}`, install.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := install.Tree{Root: t.TempDir()}
			if err := os.WriteFile(filepath.Join(tr.Root, install.JournalName), []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			j, err := install.LoadJournal(tr)
			switch {
			case tc.want == nil && (err != nil || j == nil):
				t.Fatalf("LoadJournal = %+v, %v; want the journal", j, err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("LoadJournal = %+v, %v; want %v", j, err, tc.want)
			}
		})
	}
	j, err := install.LoadJournal(install.Tree{Root: t.TempDir()})
	if j != nil || err != nil {
		t.Fatalf("no journal file: LoadJournal = %+v, %v; want nil, nil", j, err)
	}
}

// TestRecoveryRules: every step has a rule, and the rule matches what may
// have changed by then: nothing outside versions/ before the target's
// database or links are touched, the target possibly running after.
func TestRecoveryRules(t *testing.T) {
	want := map[install.Step]install.Recovery{
		install.StepFetch:         install.RecoverForget,
		install.StepBackup:        install.RecoverForget,
		install.StepRestoreTarget: install.RecoverUndo,
		install.StepSwap:          install.RecoverUndo,
		install.StepStart:         install.RecoverUndo,
		install.StepHealth:        install.RecoverUndo,
		install.StepCommit:        install.RecoverCommit,
		install.StepRollback:      install.RecoverRollback,
		install.StepUndone:        install.RecoverNone,
	}
	for step, rule := range want {
		if got := install.RecoveryFor(step); got != rule {
			t.Errorf("RecoveryFor(%s) = %q, want %q", step, got, rule)
		}
	}
	if got := install.RecoveryFor("reticulate"); got != "" {
		t.Errorf("an unknown step has rule %q", got)
	}
}
