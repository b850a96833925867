package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestCatchAllEndToEnd: a real agentd enrolled in group "lab", which the
// config does not name, follows the catch-all group (prod, the last):
// counted in its initial count, told what to do by the copy of prod's
// status the controller writes under lab's key (its credentials read no
// other), it installs the target with prod; fleetctl status, the
// dashboard's status and the controller's metrics show it caught.
func TestCatchAllEndToEnd(t *testing.T) {
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{groupConfig("canary", 1, 50), groupConfig("prod", 1, 50)}
	f := startFleet(t, map[string]int{"canary": 1, "prod": 2}, 0, func(f *fleet) {
		f.setConfig(cfg)
		f.setSpec(func(s *rollout.Spec) { s.StartVersion, s.TargetVersion = "1.0.0", "1.0.0" })
	})
	lab := f.startAgent("lab", false)
	f.agents = append(f.agents, lab) // waitDone checks it runs the target too
	f.waitDone("1.0.0", 2*time.Minute)
	natstest.Eventually(t, time.Minute, func() error {
		if st := f.statuses()["lab"]; st.Follows != "prod" {
			return fmt.Errorf("lab's status follows %q, want prod", st.Follows)
		}
		return nil
	})

	t0 := f.setSpec(func(s *rollout.Spec) { s.StartVersion, s.TargetVersion = "1.0.0", "1.1.0" })
	f.waitDone("1.1.0", 3*time.Minute)
	st := f.statuses()
	if p := st["prod"]; p.InitialCount != 3 {
		t.Errorf("prod started with %d agents, want 3 (its 2 and lab's 1)", p.InitialCount)
	}
	if l := st["lab"]; l.Follows != "prod" || l.State != rollout.StateDone || l.TargetVersion != "1.1.0" {
		t.Errorf("lab's status: follows %q, %s on %s; want prod's copy, done on 1.1.0", l.Follows, l.State, l.TargetVersion)
	}
	// lab updated with prod, not before: after canary was done (or as
	// prod's canary).
	canaryDone := eventTime(t, f.eventsSince(t0), "canary", rollout.StateActive, rollout.StateDone)
	sp, ok := f.updateSpans(t0, "1.1.0")[lab.id]
	if !ok {
		t.Fatal("the lab host never updated to 1.1.0")
	}
	if sp.start.Before(canaryDone) {
		t.Errorf("the lab host started updating at %v, before canary was done at %v", sp.start, canaryDone)
	}

	// fleetctl status, as JSON and as a table.
	out, _ := fleetctl(t, f, 0, "status", "-o", "json")
	var rep view.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var prod, labRep *view.GroupRollout
	for _, g := range rep.Groups {
		switch g.Name {
		case "prod":
			prod = g.Rollout
		case "lab":
			labRep = g.Rollout
		}
	}
	if prod == nil || !prod.CatchAll || prod.Caught == nil || prod.Caught.Agents != 1 || !slices.Equal(prod.Caught.Groups, []string{"lab"}) {
		t.Errorf("status: prod %+v; want the catch-all catching lab's 1 agent", prod)
	}
	if labRep == nil || labRep.Follows != "prod" {
		t.Errorf("status: lab %+v; want follows prod", labRep)
	}
	table, _ := fleetctl(t, f, 0, "status")
	for _, want := range []string{"lab: not in the config: its agent follows catch-all group prod", "prod: catch-all: also rolls out 1 agent of 1 group not in the config: lab"} {
		if !strings.Contains(strings.Join(strings.Fields(table), " "), want) {
			t.Errorf("status lacks %q:\n%s", want, table)
		}
	}
	_, stderr := fleetctl(t, f, 0, "agents", "ls", "--group", "lab")
	if !strings.Contains(stderr, `follow catch-all group "prod"`) {
		t.Errorf("agents ls --group lab: stderr %q, want the note that they follow prod", stderr)
	}

	// agentd says so on the host.
	logData, err := os.ReadFile(filepath.Join(f.dir, fmt.Sprintf("agent-%d.log", lab.n)))
	if err != nil || !strings.Contains(string(logData), "this host follows catch-all group") {
		t.Errorf("the lab host's log does not say it follows the catch-all group (%v)", err)
	}

	// The controller: its dashboard's status and its metrics.
	base := strings.TrimSuffix(f.findURL, "/v1/find")
	natstest.Eventually(t, 30*time.Second, func() error {
		body, err := get(base + "/metrics")
		if err != nil {
			return err
		}
		for _, want := range []string{`fleetwave_group_caught_agents{app="default",group="prod"} 1`, `fleetwave_catch_all_unfollowed_groups{app="default"} 0`} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("metrics lack %s", want)
			}
		}
		body, err = get(base + "/api/v1/status")
		if err != nil {
			return err
		}
		if !strings.Contains(body, `"caught":{"agents":1,"groups":["lab"]}`) || !strings.Contains(body, `"follows":"prod"`) {
			return fmt.Errorf("dashboard status does not show lab caught by prod: %.2000s", body)
		}
		return nil
	})
}

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}
