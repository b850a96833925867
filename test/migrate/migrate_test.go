// Package migrate upgrades a fleet that runs the single-app layout (a bus
// written by commit 298d45f, testdata/) to apps (issue 26 point 5): today's
// controller starts on the old store with the old auth dir, nothing moves,
// no rollout restarts, the hosts keep heartbeating with the creds they were
// enrolled with, and the fleet then names its app and takes a second one.
package migrate_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natsembed"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/internal/proctest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

var binDir string

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, &binDir, "cmd/controller", "cmd/fleetctl"))
}

// fixture is testdata/fixture.json (test/migrate/gen writes it).
type fixture struct {
	Commit     string `json:"commit"`
	ControlID  string `json:"controller_id"`
	Start      string `json:"start_version"`
	Target     string `json:"target_version"`
	Quarantine string `json:"quarantined_version"`
	Groups     map[string]struct {
		State string `json:"state"`
	} `json:"groups"`
	Agents []struct {
		ID      string `json:"id"`
		Group   string `json:"group"`
		Version string `json:"version"`
		Creds   string `json:"creds"`
	} `json:"agents"`
}

// before is what the old store holds, read with a bare server before any
// controller of today's code touched it.
type before struct {
	state      *kv.State
	eventsLast uint64
	auditLast  uint64
}

func TestMigrateFrom298d45f(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var fx fixture
	b, err := os.ReadFile("testdata/fixture.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	storeDir, authDir := filepath.Join(dir, "store"), filepath.Join(dir, "auth")
	untar(t, "testdata/store.tar.gz", storeDir)
	untar(t, "testdata/auth.tar.gz", authDir)
	adminCreds := filepath.Join(authDir, auth.CredsFile(auth.UserAdmin))

	old := readOld(t, ctx, storeDir, authDir)
	// The fixture is what its README says: canary done, prod active with
	// 2 of 5 hosts on the target, edge unstarted, 1.0.9 quarantined.
	for g, want := range fx.Groups {
		if got := old.state.Groups[g].Value.State; string(got) != want.State {
			t.Fatalf("fixture: group %s is %s, want %s", g, got, want.State)
		}
	}
	if !old.state.HasSpec || old.state.Spec.Value.TargetVersion != fx.Target {
		t.Fatalf("fixture: spec %+v, want target %s", old.state.Spec.Value, fx.Target)
	}

	// Today's controller on the old store and auth dir, as the same
	// controller id: an upgrade in place of the binary.
	port := natstest.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	controllerArgs := []string{"run", "--auth-dir", authDir, "--store-dir", storeDir,
		"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--id", fx.ControlID, "--heartbeat-interval", "1s",
		"--stats-interval", "1s", "--reconcile-interval", "300ms"}
	stopController := start(t, filepath.Join(dir, "controller.log"), "controller", controllerArgs...)

	// The hosts: every agent heartbeats as it did before the upgrade, on
	// fleet.hb.<group>.<id> with no app in the body, with the creds it was
	// enrolled with at 298d45f.
	var agents []*oldAgent
	for _, a := range fx.Agents {
		agents = append(agents, startAgent(t, ctx, url, filepath.Join(authDir, a.Creds), a.ID, a.Group, a.Version))
	}

	nc, js := connect(t, url, adminCreds)
	var fleet *kv.Fleet
	natstest.Eventually(t, 30*time.Second, func() error {
		var err error
		fleet, err = kv.Open(ctx, js)
		return err
	})
	defaultCounted := func(ns kv.AppNS) func() error {
		return func() error {
			stats, err := fleet.ReadStats(ctx)
			if err != nil {
				return err
			}
			n := 0
			for _, s := range kv.StatsOf(stats, ns) {
				if time.Since(s.At) < 5*time.Second {
					n += s.Versions.Total()
				}
			}
			if n != len(agents) {
				return fmt.Errorf("app %s: %d agents counted, want %d", ns.Name, n, len(agents))
			}
			return nil
		}
	}
	st := readState(t, ctx, fleet)
	natstest.Eventually(t, 30*time.Second, defaultCounted(kv.DefaultNS(st.Config.Value)))

	// Nothing restarted: every group as the old controller left it, for
	// more than a few reconcile passes with every agent counted.
	kept := func() error { return sameRollout(old.state, readState(t, ctx, fleet)) }
	natstest.Consistently(t, 3*time.Second, kept)
	for _, a := range agents {
		if err := a.readPlan(ctx); err != nil {
			t.Errorf("agent %s (old creds) reads its plan: %v", a.id, err)
		}
	}

	// The auth dir of 298d45f grants its controller the default app's
	// keys only: "fleetctl auth upgrade" re-signs the accounts with every
	// app's exports and imports and pushes them, and the controller (not a
	// host) gets new creds with this version's grants and restarts on
	// them. No agent's creds file changes: the hosts keep the ones they
	// were enrolled with, and keep heartbeating through the restart.
	credsBefore := readCreds(t, authDir)
	fleetctl(t, url, adminCreds, "auth", "upgrade", "--dir", authDir)
	fleetctl(t, url, adminCreds, "auth", "user", "--dir", authDir, "--name", auth.UserController, "--role", "controller", "--reason", "grants of apps")
	for p, c := range readCreds(t, authDir) {
		if strings.Contains(p, string(filepath.Separator)+"agents"+string(filepath.Separator)) && c != credsBefore[p] {
			t.Errorf("the upgrade changed the agent creds %s", p)
		}
	}
	stopController()
	start(t, filepath.Join(dir, "controller-2.log"), "controller", controllerArgs...)
	natstest.Eventually(t, 30*time.Second, defaultCounted(kv.DefaultNS(st.Config.Value)))
	natstest.Consistently(t, 2*time.Second, kept)

	// The fleet names its app and adds a second one: the default app is
	// the first of apps, so nothing moves.
	fleetctl(t, url, adminCreds, "apps", "add", "web", "--default", "--reason", "name the app")
	natstest.Consistently(t, 2*time.Second, kept)
	fleetctl(t, url, adminCreds, "apps", "add", "db", "--installer", "script", "--reason", "a second app")
	st = readState(t, ctx, fleet)
	if got := st.Config.Value.DefaultApp(); got != "web" {
		t.Fatalf("default app %q after the apply, want web", got)
	}
	web, err := kv.NS(st.Config.Value, "web")
	if err != nil || !web.IsDefault() {
		t.Fatalf("app web: %+v, %v: want the default app", web, err)
	}
	natstest.Consistently(t, 3*time.Second, kept)
	natstest.Eventually(t, 10*time.Second, defaultCounted(web))

	// The second app can be planned; the controller rolls it out on its own
	// keys and leaves web's alone.
	db, err := kv.NS(st.Config.Value, "db")
	if err != nil || db.IsDefault() {
		t.Fatalf("app db: %+v, %v", db, err)
	}
	fleetctl(t, url, adminCreds, "plan", "set", "--app", "db", "--start", "2.0.0", "--target", "2.1.0", "--critical", "--reason", "db's first rollout")
	natstest.Eventually(t, 20*time.Second, func() error {
		st := readState(t, ctx, fleet)
		a := st.ForApp(db)
		if !a.HasSpec || a.Spec.Value.TargetVersion != "2.1.0" {
			return fmt.Errorf("db's spec: %+v", a.Spec.Value)
		}
		for _, g := range []string{"canary", "prod", "edge"} {
			e, ok := a.Groups[g]
			if !ok || e.Value.TargetVersion != "2.1.0" {
				return fmt.Errorf("db's group %s: %+v (present %v)", g, e.Value, ok)
			}
		}
		return nil
	})
	natstest.Consistently(t, 2*time.Second, kept)

	// No event reset or restarted a group of the default app since the
	// upgrade; every new one names its app.
	for _, ev := range eventsSince(t, ctx, nc, old.eventsLast) {
		if ev.App == "" {
			t.Errorf("event without app after the upgrade: %+v", ev)
		}
		if ev.App != "db" && ev.Kind == rollout.EventTransition {
			t.Errorf("the default app's group %s moved after the upgrade: %s -> %s (%s)", ev.Group, ev.From, ev.To, ev.Reason)
		}
	}
	for _, a := range agents {
		if n := a.failures(); n > 0 {
			t.Errorf("agent %s: %d errors from the server (last: %v)", a.id, n, a.lastErr())
		}
		if at := a.acked(); time.Since(at) > 5*time.Second {
			t.Errorf("agent %s: last heartbeat acked at %v, not in the last 5 s", a.id, at)
		}
	}
}

// sameRollout says how now's default-app rollout differs from was: specs,
// quarantine and every group's state, target and start; the revisions of
// groups that are done or unstarted (nothing for a controller to write).
func sameRollout(was, now *kv.State) error {
	if now.Spec.Revision != was.Spec.Revision || now.Spec.Value.TargetVersion != was.Spec.Value.TargetVersion {
		return fmt.Errorf("spec: revision %d target %s, was %d %s", now.Spec.Revision, now.Spec.Value.TargetVersion, was.Spec.Revision, was.Spec.Value.TargetVersion)
	}
	if now.Quarantine.Revision != was.Quarantine.Revision || len(now.Quarantine.Value.Versions) != len(was.Quarantine.Value.Versions) {
		return fmt.Errorf("quarantine: revision %d %+v, was %d %+v", now.Quarantine.Revision, now.Quarantine.Value, was.Quarantine.Revision, was.Quarantine.Value)
	}
	if len(now.Groups) != len(was.Groups) {
		return fmt.Errorf("%d group statuses, was %d", len(now.Groups), len(was.Groups))
	}
	var errs []error
	for g, w := range was.Groups {
		n, ok := now.Groups[g]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("group %s: status gone", g))
		case n.Value.State != w.Value.State || n.Value.TargetVersion != w.Value.TargetVersion ||
			n.Value.StartVersion != w.Value.StartVersion || !n.Value.StartedAt.Equal(w.Value.StartedAt) || n.Value.Halted:
			errs = append(errs, fmt.Errorf("group %s: %s target %s start %s started %s halted %v, was %s %s %s %s",
				g, n.Value.State, n.Value.TargetVersion, n.Value.StartVersion, n.Value.StartedAt, n.Value.Halted,
				w.Value.State, w.Value.TargetVersion, w.Value.StartVersion, w.Value.StartedAt))
		case w.Value.State != rollout.StateActive && n.Revision != w.Revision:
			errs = append(errs, fmt.Errorf("group %s (%s): revision %d, was %d", g, n.Value.State, n.Revision, w.Revision))
		case n.Value.Progress < w.Value.Progress:
			errs = append(errs, fmt.Errorf("group %s: progress %v, was %v", g, n.Value.Progress, w.Value.Progress))
		}
	}
	return errors.Join(errs...)
}

// readCreds reads every creds file of the auth dir.
func readCreds(t *testing.T, authDir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(authDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".creds") {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readOld starts a bare server (no controller) on the old store in
// operator mode and reads what the old code left there.
func readOld(t *testing.T, ctx context.Context, storeDir, authDir string) before {
	t.Helper()
	srv, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: storeDir,
		ConfigFile: filepath.Join(authDir, auth.FileResolverConf)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	nc, js := connect(t, srv.ClientURL(), filepath.Join(authDir, auth.CredsFile(auth.UserAdmin)))
	defer nc.Close()
	fleet, err := kv.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	var b before
	b.state = readState(t, ctx, fleet)
	for name, last := range map[string]*uint64{kv.StreamEvents: &b.eventsLast, kv.StreamAudit: &b.auditLast} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			t.Fatalf("fixture: stream %s is empty", name)
		}
		*last = info.State.LastSeq
	}
	return b
}

func readState(t *testing.T, ctx context.Context, fleet *kv.Fleet) *kv.State {
	t.Helper()
	st, err := fleet.ReadState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Problems) > 0 {
		t.Fatalf("plan problems: %+v", st.Problems)
	}
	return st
}

// eventsSince returns the rollout events stored after sequence seq.
func eventsSince(t *testing.T, ctx context.Context, nc *nats.Conn, seq uint64) []rollout.Event {
	t.Helper()
	var out []rollout.Event
	_, err := kv.DirectGetBatch(ctx, nc, kv.StreamEvents, kv.BatchRequest{Seq: seq + 1, Batch: 1000}, func(m kv.StoredMsg) error {
		var ev rollout.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			return fmt.Errorf("event %d: %w", m.Sequence, err)
		}
		out = append(out, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func connect(t *testing.T, url, creds string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{URL: url, Creds: creds, Log: natstest.Logger(t), RetryFirst: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, js
}

// oldAgent heartbeats as an agentd of 298d45f: its creds, its subject, a
// body without app, acked by the stream, every 500 ms.
type oldAgent struct {
	id, group string
	nc        *nats.Conn

	mu     sync.Mutex
	failed int   // permission errors the server sent
	lastE  error // the last of them
	lastOK time.Time
}

func startAgent(t *testing.T, ctx context.Context, url, creds, id, group, version string) *oldAgent {
	t.Helper()
	a := &oldAgent{id: id, group: group}
	// A heartbeat may fail while the controller (and its embedded server)
	// restarts; a permission error never may.
	onErr := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		a.mu.Lock()
		a.failed++
		a.lastE = err
		a.mu.Unlock()
	})
	nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{URL: url, Creds: creds, Name: "agent " + id,
		InboxPrefix: kv.AgentInboxPrefix(id), Log: natstest.Logger(t), RetryFirst: true, Extra: []nats.Option{onErr}})
	if err != nil {
		t.Fatal(err)
	}
	a.nc = nc
	hb := heartbeat.Heartbeat{AgentID: rollout.AgentID(id), Hostname: "host-" + id[:8], Group: group,
		ActiveVersion: version, UpdaterVersion: "0.0.0-298d45f"}
	if version != "1.0.0" {
		hb.StartVersion = "1.0.0"
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			hb.V, hb.At, hb.Seq = heartbeat.SchemaVersion, time.Now().UTC(), hb.Seq+1
			data, err := heartbeat.Encode(&hb)
			if err == nil {
				if strings.Contains(string(data), `"app"`) {
					err = errors.New("today's encoder put an app in a default-app heartbeat")
				} else {
					pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
					_, err = js.Publish(pctx, heartbeat.SubjectFor(group, hb.AgentID), data)
					pcancel()
				}
			}
			a.mu.Lock()
			if err == nil {
				a.lastOK = time.Now()
			}
			a.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; nc.Close() })
	return a
}

func (a *oldAgent) failures() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.failed
}

// acked is when the stream last acked a heartbeat of the agent.
func (a *oldAgent) acked() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastOK
}

func (a *oldAgent) lastErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastE
}

// readPlan reads the agent's plan as agentd does (direct gets of spec and
// its group's status) with its old creds.
func (a *oldAgent) readPlan(ctx context.Context) error {
	for _, key := range []string{kv.KeySpec, kv.GroupKey(a.group)} {
		if _, err := kv.DirectGetLast(ctx, a.nc, kv.PlanStream, kv.KeySubject(kv.BucketPlan, key)); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	return nil
}

func fleetctl(t *testing.T, url, creds string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "fleetctl"), append([]string{"--nats", url, "--creds", creds}, args...)...)
	cmd.Env = append(os.Environ(), "FLEETCTL_ACTOR=migrate-test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fleetctl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// start runs a binary until the test ends (SIGTERM, then wait); its log is
// shown when the test fails, and no permission violation may be in it.
func start(t *testing.T, logPath, name string, args ...string) (stop func()) {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { stopCmd(t, cmd, logFile, logPath) }) }
	t.Cleanup(stop)
	return stop
}

// stopCmd stops a started binary (SIGTERM, then wait) and checks its log.
func stopCmd(t *testing.T, cmd *exec.Cmd, logFile *os.File, logPath string) {
	{
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		b, _ := os.ReadFile(logPath)
		if strings.Contains(strings.ToLower(string(b)), "permissions violation") {
			t.Errorf("%s logs a permissions violation", logPath)
		}
		if t.Failed() {
			s := string(b)
			if len(s) > 4000 {
				s = "…" + s[len(s)-4000:]
			}
			t.Logf("--- %s:\n%s", logPath, s)
		}
	}
}

// untar unpacks a .tar.gz of regular files and directories into dir.
func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("%s: entry %q outside the dir", file, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o750); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
				t.Fatal(err)
			}
			out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o700|0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: entry %q of type %c", file, h.Name, h.Typeflag)
		}
	}
}
