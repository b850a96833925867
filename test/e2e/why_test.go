package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestWhyAHostFailedEndToEnd is issue 25 point 7 with the real binaries:
// groups a, b and c each roll 1.2.0, a release whose app prints why it
// cannot start on stderr and exits, out to one canary; each canary rolls
// back and each group halts (quarantine off). Then quarantine_after 3
// quarantines 1.2.0 from those three rollbacks, and d (behind c) halts on
// the quarantine. Where an operator looks, the app's own words and the
// host's name are there:
//   - fleetctl agents ls has a REASON column, and agents ls --id shows the
//     app's last lines (before: only "rolled back from 1.2.0", the line
//     only in agentd's log);
//   - fleetctl status lists each group's failed agents with host and
//     reason, and says the quarantine once, not under every group;
//   - halt and quarantine reasons name the host beside the id;
//   - the dashboard's /api/v1/agents carries the output;
//   - the halt webhook's event names the canary with its error and
//     output.
func TestWhyAHostFailedEndToEnd(t *testing.T) {
	cfg := rollout.DefaultConfig()
	cfg.QuarantineAfter = 0 // first the canaries' own halts
	cfg.Groups = fourGroups()
	secret := []byte("e2e-why-secret")
	secretFile := filepath.Join(t.TempDir(), "webhook.secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	rcv := startHookReceiver(t, secret)
	f := startFleet(t, map[string]int{"a": 2, "b": 2, "c": 2, "d": 2}, 0, func(f *fleet) {
		f.setConfig(cfg)
		f.setSpec(func(s *rollout.Spec) { s.StartVersion, s.TargetVersion = "1.1.0", "1.1.0" })
	}, "--webhook", rcv.url(), "--webhook-secret-file", secretFile, "--webhook-events", "halt", "--attribution-grace", "1h")
	f.waitDone("1.1.0", 2*time.Minute)

	f.setSpec(func(s *rollout.Spec) { s.StartVersion, s.TargetVersion = "1.1.0", "1.2.0" })
	halted := func(groups ...string) func() error {
		return func() error {
			st := f.statuses()
			for _, g := range groups {
				if s := st[g]; !s.Halted || s.TargetVersion != "1.2.0" {
					return fmt.Errorf("group %s: %s on %s, halted %t", g, s.State, s.TargetVersion, s.Halted)
				}
			}
			return nil
		}
	}
	natstest.Eventually(t, 2*time.Minute, halted("a", "b", "c"))
	cfg.QuarantineAfter = 3
	f.setConfig(cfg)
	natstest.Eventually(t, time.Minute, func() error {
		e, err := f.kv.ReadQuarantine(f.ctx)
		if err != nil {
			return err
		}
		if !e.Value.Quarantined("1.2.0") {
			return fmt.Errorf("1.2.0 not quarantined yet")
		}
		return halted("d")()
	})
	const appSaid = "app 1.2.0: cannot start (simulated broken release)"

	// The canaries that rolled back, by their last heartbeats.
	hosts := map[rollout.AgentID]string{}
	var canary rollout.AgentID
	for id, hb := range f.lastBeats() {
		hosts[id] = hb.Hostname
		if hb.Rollback && hb.RollbackFrom == "1.2.0" && hb.Group == "a" {
			canary = id
		}
	}
	if canary == "" {
		t.Fatal("no rolled back agent in group a")
	}
	host := hosts[canary]

	// Halt and quarantine reasons name the host beside the id.
	st := f.statuses()
	if want := "canary " + string(canary) + " (" + host + ") failed"; !strings.Contains(st["a"].HaltReason, want) {
		t.Errorf("group a's halt reason %q, want it to name %q", st["a"].HaltReason, want)
	}
	q, _ := f.kv.ReadQuarantine(f.ctx)
	if qq, _ := q.Value.Lookup("1.2.0"); !strings.Contains(qq.Reason, string(canary)+" ("+host+")") {
		t.Errorf("quarantine reason %q does not name %s (%s)", qq.Reason, canary, host)
	}

	// agents ls: the reason in the table, the app's lines in --id.
	out, _ := fleetctl(t, f, 0, "agents", "ls", "--group", "a")
	if !strings.Contains(out, "REASON") || !strings.Contains(out, "new version unhealthy") {
		t.Errorf("agents ls --group a shows no reason:\n%s", out)
	}
	out, _ = fleetctl(t, f, 0, "agents", "ls", "--id", string(canary))
	for _, want := range []string{"Hostname:    " + host, "State:       rolled back from 1.2.0", "Error:       rolled back from 1.2.0: new version unhealthy",
		"  | " + appSaid} {
		if !strings.Contains(out, want) {
			t.Errorf("agents ls --id %s lacks %q:\n%s", canary, want, out)
		}
	}
	fleetctl(t, f, 2, "agents", "ls", "--id", "not-an-id")
	_, errOut := fleetctl(t, f, 1, "agents", "ls", "--id", "0b000000-0000-4000-8000-000000000000")
	if !strings.Contains(errOut, "no heartbeat of it") {
		t.Errorf("agents ls --id of an unknown agent: %s", errOut)
	}

	// status: the failures with host and reason; the quarantine once.
	out, _ = fleetctl(t, f, 0, "status")
	if n := strings.Count(out, "rolled back from 1.2.0 (release failures"); n != 1 {
		t.Errorf("status says the quarantine reason %d times, want once:\n%s", n, out)
	}
	for _, want := range []string{"Quarantined: 1.2.0, by the controller", "halts d;", "d: halted", "its target 1.2.0 is quarantined (see Quarantined)",
		"Failed agents:", "  a: " + host + " (" + string(canary) + ") rolled back from 1.2.0: new version unhealthy",
		"last output: " + appSaid} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	out, _ = fleetctl(t, f, 0, "status", "-o", "json")
	var rep struct {
		Groups []struct {
			Name     string `json:"name"`
			Failures []struct {
				ID       rollout.AgentID `json:"id"`
				Hostname string          `json:"hostname"`
				Reason   string          `json:"reason"`
				Output   string          `json:"output"`
			} `json:"failures"`
		} `json:"groups"`
		Quarantined []struct {
			Version string   `json:"version"`
			Halts   []string `json:"halts"`
		} `json:"quarantined"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Quarantined) != 1 || rep.Quarantined[0].Version != "1.2.0" || strings.Join(rep.Quarantined[0].Halts, ",") != "d" {
		t.Errorf("status -o json quarantined: %+v", rep.Quarantined)
	}
	for _, g := range rep.Groups {
		if g.Name == "a" && (len(g.Failures) != 1 || g.Failures[0].ID != canary || g.Failures[0].Hostname != host || g.Failures[0].Output != appSaid) {
			t.Errorf("status -o json failures of a: %+v", g.Failures)
		}
	}

	// The dashboard's agents carry the output.
	dash := strings.TrimSuffix(f.findURL, "/v1/find") + controller.PathAPIAgents + "?state=rolled_back&group=a"
	resp, err := http.Get(dash)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Decoded into the fields the page promises (docs/dashboard.md), not
	// into controller.AgentsPage: what is checked is the wire.
	var page struct {
		Agents []struct {
			ID     rollout.AgentID `json:"id"`
			Error  string          `json:"error"`
			Output string          `json:"output"`
		} `json:"agents"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("%s: %v\n%s", dash, err, body)
	}
	if len(page.Agents) != 1 || page.Agents[0].ID != canary || page.Agents[0].Output != appSaid || page.Agents[0].Error == "" {
		t.Errorf("dashboard agents: %+v, want %s with its output", page.Agents, canary)
	}

	// The halt's webhook names the canary, why, and what its app said.
	natstest.Eventually(t, 30*time.Second, func() error {
		for _, p := range rcv.posts() {
			if p.Kind != string(rollout.EventHalt) || p.Group != "a" || p.Event == nil {
				continue
			}
			agents := eventAgentsOf(t, p)
			if len(agents) != 1 {
				return fmt.Errorf("halt of a names agents %+v", agents)
			}
			a := agents[0]
			if a.ID != canary || a.Hostname != host || a.Output != appSaid || !strings.Contains(a.Error, "new version unhealthy") {
				return fmt.Errorf("halt of a names %+v, want %s (%s) with its error and output", a, canary, host)
			}
			if !strings.Contains(p.Text, "last output of "+host+": "+appSaid) {
				return fmt.Errorf("halt text %q lacks the app's last line", p.Text)
			}
			return nil
		}
		return fmt.Errorf("no halt webhook for group a yet (%d posts)", len(rcv.posts()))
	})
}

// wireAgent is an agent a halt event names, as the webhook's JSON has it.
type wireAgent struct {
	ID       rollout.AgentID `json:"id"`
	Hostname string          `json:"hostname"`
	Error    string          `json:"error"`
	Output   string          `json:"output"`
}

// eventAgentsOf are the agents p's event names (event.agents), read from
// the event's JSON.
func eventAgentsOf(t *testing.T, p controller.WebhookPayload) []wireAgent {
	t.Helper()
	data, err := json.Marshal(p.Event)
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Agents []wireAgent `json:"agents"`
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatal(err)
	}
	return ev.Agents
}
