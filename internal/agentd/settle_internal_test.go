package agentd

import (
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// TestSettle: once the plan wants what is installed, the error of an
// install that is no longer wanted goes (interrupted, blocked, a bad
// artifact); a rollback's verdict stays; nothing changes while the plan
// wants another version.
func TestSettle(t *testing.T) {
	t.Parallel()
	interrupted := install.Status{ActiveVersion: "2.0.0", Error: "install of 1.0.0 interrupted (…); restored 2.0.0",
		ErrorClass: install.ClassInfrastructure, ErrorCause: "interrupted"}
	artifact := install.Status{ActiveVersion: "2.0.0", Error: "install 3.0.0: fetch: checksum mismatch",
		ErrorClass: install.ClassArtifact, ErrorCause: "checksum mismatch"}
	rolledBack := install.Status{ActiveVersion: "2.0.0", Rollback: true, RollbackFrom: "3.0.0", Error: "rolled back from 3.0.0: unhealthy",
		ErrorClass: install.ClassRelease, ErrorCause: "unhealthy"}
	rolledBackThenBlocked := rolledBack
	rolledBackThenBlocked.Error, rolledBackThenBlocked.ErrorClass, rolledBackThenBlocked.ErrorCause = "install 4.0.0: fetch: download failed (HTTP 503)", install.ClassInfrastructure, "download failed (HTTP 503)"
	clean := func(st install.Status) install.Status {
		st.SetError("", nil)
		return st
	}
	for _, tc := range []struct {
		name    string
		st      install.Status
		desired string
		want    install.Status
		cleared bool
	}{
		{"interrupted, desired is installed", interrupted, "2.0.0", clean(interrupted), true},
		{"interrupted, desired is another version", interrupted, "1.0.0", interrupted, false},
		{"interrupted, no plan", interrupted, "", interrupted, false},
		{"artifact, desired is installed", artifact, "2.0.0", clean(artifact), true},
		{"rolled back: the verdict stays", rolledBack, "2.0.0", rolledBack, false},
		{"rolled back, then blocked: the block goes, the rollback stays", rolledBackThenBlocked, "2.0.0", clean(rolledBackThenBlocked), true},
		{"nothing to clear", clean(interrupted), "2.0.0", clean(interrupted), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			a := &Agent{o: Options{Root: root, Log: slog.New(slog.DiscardHandler)}, update: install.NewUpdateFile("g")}
			a.update.Status = tc.st
			a.blocked = blockedNote{target: "1.0.0", err: "x", cause: "y"}
			if got := a.settle(tc.desired); got != tc.cleared {
				t.Errorf("settle(%q) = %v, want %v", tc.desired, got, tc.cleared)
			}
			if diff := cmp.Diff(tc.want, a.Status()); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if tc.cleared {
				uf, err := install.LoadUpdateFile(root)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, uf.Status); diff != "" {
					t.Errorf("update.yaml status (-want +got):\n%s", diff)
				}
			}
		})
	}
}
