package crash_test

// A stale "blocked" (issue 25, point 4): a downgrade killed during its
// database restore, then the plan set back to the version the host runs.
// The host is where it should be; it must stop saying "blocked:
// interrupted", at once, in update.yaml, its heartbeats and so in
// 'fleetctl agents ls'.

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
)

func TestInstalledEqualsDesiredClearsBlocked(t *testing.T) {
	for _, mode := range []string{"run", "update"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			daemon := mode == "run"
			h := newHost(t, daemon, "")
			if daemon {
				h.mustRun(h.args("enable")...)
			} else {
				h.setPlan("1.0.0")
				h.mustRun(h.args("enable")...)
			}
			if daemon {
				h.install("1.0.0")
			}
			h.install("2.0.0")
			if daemon {
				h.stopDaemon()
			}

			// The downgrade, killed while it restores 1.0.0's database.
			h.setPlan("1.0.0")
			if daemon {
				h.startDaemon("restore-target-db")
				select {
				case err := <-h.runErr:
					if !killed(err) {
						t.Fatalf("agentd run did not die at restore-target-db: %v\n%s", err, h.log())
					}
				case <-time.After(90 * time.Second):
					t.Fatalf("agentd run never reached restore-target-db\n%s", h.log())
				}
				h.run = nil
			} else if out, err := h.agentd("restore-target-db", h.args("update")...); !killed(err) {
				t.Fatalf("agentd update did not die at restore-target-db: %v\n%s", err, out)
			}

			// The plan goes back to what the host runs.
			h.setPlan("2.0.0")
			if daemon {
				h.startDaemon("")
				// What the operator is shown: agents ls, from the
				// heartbeats on the bus. Promptly: well within one
				// heartbeat interval (30 s) of the restart.
				natstest.Eventually(t, 15*time.Second, func() error {
					out, err := exec.Command(fleetctlBin, "agents", "ls", "--nats", h.nats.URL(), "-o", "json").CombinedOutput()
					if err != nil {
						return fmt.Errorf("fleetctl agents ls: %v: %s", err, out)
					}
					var rep struct {
						Agents []struct {
							ActiveVersion string `json:"active_version"`
							Error         string `json:"error"`
							Class         string `json:"class"`
						} `json:"agents"`
					}
					if err := json.Unmarshal(out, &rep); err != nil {
						return fmt.Errorf("%v: %s", err, out)
					}
					if len(rep.Agents) != 1 {
						return fmt.Errorf("%d agents listed, want 1: %s", len(rep.Agents), out)
					}
					if a := rep.Agents[0]; a.ActiveVersion != "2.0.0" || a.Class != "ok" || a.Error != "" {
						return fmt.Errorf("agents ls: installed %s, class %q, error %q; want 2.0.0, ok, no error (installed equals desired)",
							a.ActiveVersion, a.Class, a.Error)
					}
					return nil
				})
			} else {
				out, err := h.agentd("", h.args("update")...)
				if err != nil || !strings.Contains(out, "up to date: 2.0.0") {
					t.Fatalf("agentd update: %v\n%s", err, out)
				}
			}
			st, err := h.status()
			if err != nil {
				t.Fatal(err)
			}
			if st.ActiveVersion != "2.0.0" || st.Error != "" || st.ErrorClass != "" || st.Rollback {
				t.Fatalf("update.yaml: active %s, error %q (%s), rollback %v; want 2.0.0 with no error\n%s",
					st.ActiveVersion, st.Error, st.ErrorClass, st.Rollback, h.log())
			}
			h.check("2.0.0", "")
			if daemon {
				h.stopDaemon()
			}
		})
	}
}
