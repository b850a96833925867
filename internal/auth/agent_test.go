package auth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestRealAgentAndControllerWithMintedCreds runs the real controller (with
// the controller creds) and the real agentd (with an agent's minted creds)
// against an operator-mode server: the agent's heartbeats land in the
// stream, the controller counts it and writes its group's status, and the
// agent reads its plan; nobody hits a permissions violation.
func TestRealAgentAndControllerWithMintedCreds(t *testing.T) {
	realAgentAndController(t, auth.AppGrant{})
}

// TestRealAgentWithAppCreds: the same with an agent minted for apps beside
// the default one (--apps core,web) and for any app (--apps '*'): the
// default app's agentd works with either, nobody hits a violation (the
// subscription limit, the inbox, the grants of the default app are all
// still there).
func TestRealAgentWithAppCreds(t *testing.T) {
	for name, g := range map[string]auth.AppGrant{
		"core,web": {Apps: []string{"web"}, DefaultName: "core"},
		"*":        {Any: true},
	} {
		t.Run(name, func(t *testing.T) { realAgentAndController(t, g) })
	}
}

func realAgentAndController(t *testing.T, grant auth.AppGrant) {
	e := newFleetEnvBare(t)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()

	ctlDone, ctlLog := e.runController(ctx)
	var fleet *kv.Fleet
	natstest.Eventually(t, 20*time.Second, func() (err error) {
		select {
		case err := <-ctlDone:
			t.Fatalf("controller stopped: %v", err)
		default:
		}
		fleet, err = kv.Open(ctx, e.js(auth.CredsFile(auth.UserAdmin)))
		return err
	})
	cfg := rollout.DefaultConfig()
	g := rollout.DefaultGroup("blue")
	g.CanaryCount = 1
	cfg.Groups = []rollout.GroupConfig{g}
	if _, err := kv.Save(ctx, fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	spec.Critical = true
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}

	// The host draws its id; the operator mints creds for it.
	root := t.TempDir()
	id, err := install.LoadOrCreateAgentID(root)
	if err != nil {
		t.Fatal(err)
	}
	_, credsFile, err := e.dir.IssueAgentApps(id, "blue", grant, "")
	if err != nil {
		t.Fatal(err)
	}
	credsFile = filepath.Join(e.dir.Path, credsFile)
	var agentLog natstest.Buffer
	a, err := agentd.New(agentd.Options{Root: root, Group: "blue", NATSURL: e.srv.URL(), Creds: credsFile,
		Interval: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&agentLog, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetStatus(install.Status{ActiveVersion: "1.0.0"}); err != nil {
		t.Fatal(err)
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(ctx) }()

	// The heartbeat lands in the stream (a JetStream publish: its ack came
	// back on the agent's own inbox).
	natstest.Eventually(t, 20*time.Second, func() error {
		m, err := fleet.HB.GetLastMsgForSubject(ctx, heartbeat.SubjectFor("blue", id))
		if err != nil {
			return err
		}
		hb, err := heartbeat.DecodeFrom(m.Subject, m.Data)
		if err != nil {
			return err
		}
		if hb.Seq < 3 {
			return fmt.Errorf("heartbeat seq %d, want a few", hb.Seq)
		}
		return nil
	})
	// The controller counts the agent and makes it the group's canary.
	var status kv.Entry[rollout.GroupStatus]
	natstest.Eventually(t, 20*time.Second, func() (err error) {
		status, err = kv.Get[rollout.GroupStatus](ctx, fleet.Plan, kv.GroupKey("blue"))
		if err != nil {
			return err
		}
		if status.Value.State != rollout.StateCanary {
			return fmt.Errorf("group blue %s, want canary", status.Value.State)
		}
		return nil
	})
	// The agent reads its plan: "agentd status" (the same direct gets as
	// the daemon's follower) with the agent's creds.
	var out, errOut bytes.Buffer
	cmd := agentd.NewCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"status", "--root", root, "--nats", e.srv.URL(), "--creds", credsFile})
	cliutil.Prepare(cmd)
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("agentd status: %v\n%s", err, errOut.String())
	}
	var rep agentd.StatusReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("agentd status output: %v\n%s", err, out.String())
	}
	wantVersion, wantUpdate := rollout.Decide(id, spec, status.Value, status.Value.Mode)
	if diff := cmp.Diff(
		agentd.StatusReport{Desired: wantVersion, ShouldUpdate: wantUpdate},
		agentd.StatusReport{Desired: rep.Desired, ShouldUpdate: rep.ShouldUpdate, DesiredError: rep.DesiredError},
	); diff != "" {
		t.Errorf("plan as the agent reads it (-want +got):\n%s", diff)
	}
	if !wantUpdate || wantVersion != "1.1.0" {
		t.Errorf("the only agent of the group is not its canary told to install 1.1.0: %s %v", wantVersion, wantUpdate)
	}

	cancel()
	for name, done := range map[string]<-chan error{"agent": agentDone, "controller": ctlDone} {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("%s ended with %v", name, err)
		}
	}
	for name, log := range map[string]string{"agent": agentLog.String(), "controller": ctlLog.String()} {
		if strings.Contains(strings.ToLower(log), "permissions violation") || strings.Contains(log, "reading the plan failed") {
			t.Errorf("%s log shows a denied call:\n%s", name, log)
		}
	}
}
