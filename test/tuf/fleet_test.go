// Package tuf attacks a fleet that installs from a TUF release repository
// (issue 27): a real controller (its embedded NATS JetStream server), real
// agentd processes set up with 'agentd enable --release-repo --release-root'
// and running 'agentd run', and a repository built with pkg/release
// (internal/tuftest), served through a mirror the test controls and turns
// hostile: it replaces files, serves endless or trickled bytes, old or
// frozen metadata, and metadata forged with go-tuf's metadata API and the
// keys an attacker may hold.
//
// Every attack must be refused with the reason visible (the agents report
// error_class infrastructure and a cause starting "release repository"),
// leave the hosts as they were (active version, installed files, links),
// and hold the group, never halt it nor count a failure against the
// version; once the attack stops, the genuine release installs.
package tuf

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/internal/proctest"
	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/releases"
)

var binDir string

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, &binDir, "cmd/controller", "cmd/agentd"))
}

// app is the name the releases are published under (the target paths'
// <app>), and group the agents' rollout group.
const (
	app   = releases.App
	group = "prod"
)

// runCmd runs a binary to completion and returns its output, failing the
// test if it fails.
func runCmd(t *testing.T, name string, args ...string) string {
	t.Helper()
	return proctest.Run(t, filepath.Join(binDir, name), args...)
}

// start runs a binary until the test ends (SIGTERM, then wait), its output
// in logPath, shown when the test failed.
func start(t *testing.T, logPath, name string, args ...string) *exec.Cmd {
	t.Helper()
	return proctest.Start(t, logPath, filepath.Join(binDir, name), nil, args...)
}

// fleet is the running system: a controller, agents of one group, the
// repository and the mirror they read it through.
type fleet struct {
	t       *testing.T
	ctx     context.Context
	dir     string
	natsURL string
	kv      *kv.Fleet
	repo    *tuftest.Repo
	mirror  *mirror
	// rootFile is the root the hosts were given at enable.
	rootFile string
	agents   []*agent
	// before is the hosts' state when the target was last set.
	before []map[string]string
	// pwned is the file a hostile release's app creates when it runs: it
	// must never exist.
	pwned string

	mu     sync.Mutex
	beats  []heartbeat.Heartbeat
	events []rollout.Event
}

type agent struct {
	n    int
	root string
	bin  string
	cmd  *exec.Cmd
}

// agentFlags are every 'agentd run' flag but --root and --hostname: short
// heartbeats, blocked installs retried within seconds (not agentd's default
// 30s doubling to 10m), a stalled download given up in 2s.
var agentFlags = []string{"--heartbeat-interval", "1s", "--heartbeat-jitter", "100ms",
	"--retry-base", "500ms", "--retry-max", "2s", "--download-stall-timeout", "2s", "--log-level", "debug"}

// startFleet publishes 1.0.0 into repo, starts a controller, then n agents
// set up with 'agentd enable --release-repo <the mirror> --release-root
// <repo's root>', and waits until they run 1.0.0.
func startFleet(t *testing.T, repo *tuftest.Repo, n int) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := t.TempDir()
	natsPort, httpPort := natstest.FreePort(t), natstest.FreePort(t)
	f := &fleet{t: t, ctx: ctx, dir: dir, natsURL: fmt.Sprintf("nats://127.0.0.1:%d", natsPort), repo: repo,
		pwned: filepath.Join(dir, "PWNED")}
	f.release("1.0.0")
	f.mirror = newMirror(t, repo.Repo.Dir)
	f.rootFile = filepath.Join(dir, "root.json")
	if err := os.WriteFile(f.rootFile, repo.RootBytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	start(t, filepath.Join(dir, "controller.log"), "controller", "run",
		"--listen", fmt.Sprintf("127.0.0.1:%d", natsPort), "--store-dir", filepath.Join(dir, "nats"),
		"--http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"--heartbeat-interval", "1s", "--stats-interval", "1s", "--reconcile-interval", "500ms", "--lease-ttl", "5s")
	var nc *nats.Conn
	natstest.Eventually(t, 30*time.Second, func() error {
		c, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{URL: f.natsURL, Log: natstest.Logger(t)})
		if err != nil {
			return err
		}
		fl, err := kv.Open(ctx, js)
		if err != nil {
			c.Close()
			return err
		}
		nc, f.kv = c, fl
		return nil
	})
	t.Cleanup(nc.Close)
	f.record(nc)

	cfg := rollout.DefaultConfig()
	g := rollout.DefaultGroup(group)
	// No canary: every agent is in flight at once, so that the group
	// holds when the repository stops them all.
	g.CanaryCount, g.MaxInFlight, g.JitterSeconds = 0, 100, 0
	g.HealthTimeout, g.MinHealthyTime = rollout.Duration(10*time.Second), rollout.Duration(time.Second)
	cfg.Groups = []rollout.GroupConfig{g}
	e, _, err := f.kv.ReadConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Save(ctx, f.kv.Config, kv.KeyConfig, cfg, e.Revision); err != nil {
		t.Fatal(err)
	}
	f.setTarget("1.0.0")
	natstest.Eventually(t, 30*time.Second, func() error {
		if _, ok := f.statuses()[group]; !ok {
			return fmt.Errorf("no status for group %s yet", group)
		}
		return nil
	})
	for range n {
		f.startAgent()
	}
	f.waitDone("1.0.0")
	return f
}

// in makes t the test that f and its repository report to, until t ends:
// a subtest's failures are its own (subtests run one at a time).
func (f *fleet) in(t *testing.T) {
	parent, parentRepo := f.t, f.repo.T
	f.t, f.repo.T = t, t
	t.Cleanup(func() { f.t, f.repo.T = parent, parentRepo })
}

// startAgent sets a host up as an operator would ('agentd enable' with the
// repository and its root), then starts 'agentd run'.
func (f *fleet) startAgent() *agent {
	t := f.t
	t.Helper()
	a := &agent{n: len(f.agents) + 1}
	a.root = filepath.Join(f.dir, fmt.Sprintf("agent-%d", a.n))
	a.bin = filepath.Join(a.root, "bin")
	runCmd(t, "agentd", "enable", "--root", a.root, "--nats", f.natsURL, "--group", group,
		"--release-repo", f.mirror.URL(), "--release-root", f.rootFile, "--app-name", app,
		"--process", "app", "--bin-dir", a.bin, "--log-level", "error")
	a.cmd = start(t, filepath.Join(f.dir, fmt.Sprintf("agent-%d.log", a.n)), "agentd",
		append([]string{"run", "--root", a.root, "--hostname", fmt.Sprintf("host-%d", a.n)}, agentFlags...)...)
	f.agents = append(f.agents, a)
	return a
}

// release publishes version v of the app for this host's platform (a
// release whose app runs until stopped) and returns its target path and
// content.
func (f *fleet) release(v string) (string, []byte) {
	f.t.Helper()
	tb, err := releases.Tarball(v, releases.Good)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.repo.Add(custom(app, v), releases.File, tb), tb
}

func custom(appName, v string) release.Custom {
	return release.Custom{App: appName, Version: v, OS: runtime.GOOS, Arch: runtime.GOARCH}
}

// hostile is a release of version v whose app, if it ever ran, would
// create f.pwned.
func (f *fleet) hostile(v string) []byte {
	f.t.Helper()
	tb, err := releases.TarballScript(v, fmt.Sprintf("#!/bin/sh\ntouch '%s'\nexec sleep 1000000\n", f.pwned))
	if err != nil {
		f.t.Fatal(err)
	}
	return tb
}

func (f *fleet) record(nc *nats.Conn) {
	f.t.Helper()
	if _, err := nc.Subscribe(heartbeat.SubjectPrefix+">", func(m *nats.Msg) {
		if hb, err := heartbeat.DecodeFrom(m.Subject, m.Data); err == nil {
			f.mu.Lock()
			f.beats = append(f.beats, *hb)
			f.mu.Unlock()
		}
	}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := nc.Subscribe(kv.EventsPrefix+">", func(m *nats.Msg) {
		var ev rollout.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			f.mu.Lock()
			f.events = append(f.events, ev)
			f.mu.Unlock()
		}
	}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fleet) statuses() map[string]rollout.GroupStatus {
	f.t.Helper()
	st, err := f.kv.ReadState(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]rollout.GroupStatus{}
	for g, e := range st.Groups {
		out[g] = e.Value
	}
	return out
}

// setTarget sets the plan's target (critical: the test runs at any hour).
func (f *fleet) setTarget(v string) {
	f.t.Helper()
	e, err := kv.Get[rollout.Spec](f.ctx, f.kv.Plan, kv.KeySpec)
	spec, rev := rollout.DefaultSpec(v, v), uint64(0)
	if err == nil {
		spec, rev = e.Value, e.Revision
	}
	spec.TargetVersion, spec.Critical = v, true
	if _, err := kv.Save(f.ctx, f.kv.Plan, kv.KeySpec, spec, rev); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fleet) status(a *agent) install.Status {
	f.t.Helper()
	uf, err := install.LoadUpdateFile(a.root)
	if err != nil {
		f.t.Fatal(err)
	}
	return uf.Status
}

// waitDone waits until the group is done on v and every host runs it.
func (f *fleet) waitDone(v string) {
	f.t.Helper()
	natstest.Eventually(f.t, 90*time.Second, func() error {
		st, ok := f.statuses()[group]
		if !ok || st.TargetVersion != v || st.State != rollout.StateDone {
			return fmt.Errorf("group %s: %s on %s (halted %v %s; held %q)", group, st.State, st.TargetVersion, st.Halted, st.HaltReason, st.Held)
		}
		for _, a := range f.agents {
			if s := f.status(a); s.ActiveVersion != v {
				return fmt.Errorf("host-%d runs %q (error %q)", a.n, s.ActiveVersion, s.Error)
			}
		}
		return nil
	})
	if _, err := os.Stat(f.pwned); err == nil {
		f.t.Fatalf("a hostile release ran: %s exists", f.pwned)
	}
}

func (f *fleet) eventsSince(t0 time.Time) []rollout.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []rollout.Event
	for _, ev := range f.events {
		if !ev.At.Before(t0) {
			out = append(out, ev)
		}
	}
	return out
}

func (f *fleet) beatsSince(t0 time.Time) []heartbeat.Heartbeat {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []heartbeat.Heartbeat
	for _, b := range f.beats {
		if !b.At.Before(t0) {
			out = append(out, b)
		}
	}
	return out
}

// hostState is what must not change on a host while an attack is refused:
// the active version, every file of every installed version (by sha256)
// and every link in the bin dir.
func (f *fleet) hostState(a *agent) map[string]string {
	f.t.Helper()
	out := map[string]string{"active": f.status(a).ActiveVersion}
	versions := filepath.Join(a.root, "versions")
	err := filepath.WalkDir(versions, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(versions, p)
		if p == versions {
			return nil
		}
		// A download in progress (.download-V.part) is not installed.
		if !strings.Contains(rel, string(filepath.Separator)) && strings.HasPrefix(rel, ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out["versions/"+rel] = "-> " + l
		case d.IsDir():
			out["versions/"+rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			out["versions/"+rel] = hex.EncodeToString(sum[:])
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	ents, err := os.ReadDir(a.bin)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(a.bin, e.Name()))
		if err != nil {
			f.t.Fatal(err)
		}
		out["bin/"+e.Name()] = "-> " + l
	}
	return out
}

func (f *fleet) hostStates() []map[string]string {
	var out []map[string]string
	for _, a := range f.agents {
		out = append(out, f.hostState(a))
	}
	return out
}

// diffState says how two host states differ ("" when they do not).
func diffState(before, after map[string]string) string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if after[k] != before[k] {
			d = append(d, fmt.Sprintf("%s: %q -> %q", k, before[k], after[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if _, ok := before[k]; !ok {
			d = append(d, fmt.Sprintf("%s: new %q", k, after[k]))
		}
	}
	return strings.Join(d, "; ")
}

// trustedRoots fails the test unless every host trusts root version v
// now (the root kept under its tree, which a refresh replaces only with a
// root the previous one signed).
func (f *fleet) trustedRoots(v int64) {
	f.t.Helper()
	for _, a := range f.agents {
		b, err := release.TrustedRoot(filepath.Join(a.root, "tuf"))
		if err != nil {
			f.t.Fatal(err)
		}
		if got := rootVersionOf(f.t, b); got != v {
			f.t.Errorf("host-%d trusts root v%d, want v%d", a.n, got, v)
		}
	}
}

// running fails the test if an agent's 'agentd run' is no longer the
// process started at the beginning (no re-enrolment, no restart).
func (f *fleet) running() {
	f.t.Helper()
	for _, a := range f.agents {
		if a.cmd.ProcessState != nil || a.cmd.Process.Signal(syscall.Signal(0)) != nil {
			f.t.Fatalf("host-%d's agentd (pid %d) is not running", a.n, a.cmd.Process.Pid)
		}
	}
}

// refusal is what every host must report while an attack lasts: its
// cause starts with one of causes, and its error says each of words.
type refusal struct {
	causes []string
	words  []string
}

// because is a refusal with cause prefix cause and words.
func because(cause string, words ...string) refusal {
	return refusal{causes: []string{cause}, words: words}
}

func (r refusal) cause(c string) bool {
	for _, p := range r.causes {
		if strings.HasPrefix(c, p) {
			return true
		}
	}
	return false
}

func (r refusal) check(st install.Status) error {
	if st.ErrorClass != install.ClassInfrastructure || !r.cause(st.ErrorCause) {
		return fmt.Errorf("class %q cause %q (error %q), want infrastructure, cause %q…", st.ErrorClass, st.ErrorCause, st.Error, r.causes)
	}
	for _, w := range r.words {
		if !strings.Contains(st.Error, w) {
			return fmt.Errorf("error %q does not say %q", st.Error, w)
		}
	}
	return nil
}

// target records the hosts as they are and sets the plan's target to v;
// it returns when it did.
func (f *fleet) target(v string) time.Time {
	f.t.Helper()
	f.before = f.hostStates()
	t0 := time.Now()
	f.setTarget(v)
	return t0
}

// refused checks, while an attack lasts, that target v (set at t0 by
// target) is refused as want says on every host, with the group held: the
// hosts report it (update.yaml and heartbeats), keep their active version,
// files and links, run no hostile app, remember no rollback from v; the
// group holds (status and a "held" event), halts not and counts no
// failure. It returns once the refusal has been seen; the caller ends the
// attack and calls installs.
func (f *fleet) refused(t *testing.T, t0 time.Time, v string, want refusal) {
	t.Helper()
	before := f.before
	var st rollout.GroupStatus
	// Each host must show the refusal in update.yaml at least once; not
	// all at the same instant, since each retry clears the error while it
	// runs, and on a loaded machine a retry runs for a good share of the
	// time.
	shown := map[int]bool{}
	natstest.Eventually(t, 60*time.Second, func() error {
		if st := f.statuses()[group]; st.Halted {
			t.Fatalf("group %s halted: %s (host-1: %+v)", group, st.HaltReason, f.status(f.agents[0]))
		}
		var notYet []string
		for _, a := range f.agents {
			if shown[a.n] {
				continue
			}
			if err := want.check(f.status(a)); err != nil {
				notYet = append(notYet, fmt.Sprintf("host-%d: %v", a.n, err))
				continue
			}
			shown[a.n] = true
		}
		if len(notYet) > 0 {
			return fmt.Errorf("update.yaml has not shown the refusal yet on %s", strings.Join(notYet, "; "))
		}
		st = f.statuses()[group]
		if st.TargetVersion != v || st.Held == "" {
			return fmt.Errorf("group %s: %s on %s, not held (blocked %d)", group, st.State, st.TargetVersion, st.Blocked)
		}
		if !hasEvent(f.eventsSince(t0), rollout.EventHeld) {
			return fmt.Errorf("no held event yet")
		}
		// Every host said so in a heartbeat too.
		seen := map[string]bool{}
		for _, b := range f.beatsSince(t0) {
			if b.ErrorClass == string(install.ClassInfrastructure) && want.cause(b.ErrorCause) {
				seen[b.Hostname] = true
			}
		}
		if len(seen) != len(f.agents) {
			return fmt.Errorf("heartbeats with the refusal from %d of %d hosts", len(seen), len(f.agents))
		}
		return nil
	})
	t.Logf("refused: %s; group held: %s", f.status(f.agents[0]).Error, st.Held)
	// What an operator on the host sees: 'agentd status' says why, and
	// which root the host trusts.
	var as struct {
		Class string `json:"error_class"`
		Cause string `json:"error_cause"`
		Repo  *struct {
			RootVersion int64 `json:"root_version"`
		} `json:"release_repo"`
	}
	// (Polled: each retry clears the error while it runs.)
	if err := natstest.Within(10*time.Second, func() error {
		out := runCmd(t, "agentd", "status", "--root", f.agents[0].root)
		if err := json.Unmarshal([]byte(out), &as); err != nil {
			t.Fatalf("agentd status: %v\n%s", err, out)
		}
		if as.Class != string(install.ClassInfrastructure) || !want.cause(as.Cause) || as.Repo == nil || as.Repo.RootVersion < 1 {
			return fmt.Errorf("agentd status: class %q cause %q release_repo %+v; want infrastructure, %q…, the trusted root", as.Class, as.Cause, as.Repo, want.causes)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if st.Halted || st.FailedCount != 0 {
		t.Errorf("group %s: halted %v (%s), failed_count %d; want held, nothing failed", group, st.Halted, st.HaltReason, st.FailedCount)
	}
	for i, a := range f.agents {
		if d := diffState(before[i], f.hostState(a)); d != "" {
			t.Errorf("host-%d changed during the attack: %s", a.n, d)
		}
		if s := f.status(a); s.Rollback && s.RollbackFrom == v {
			t.Errorf("host-%d remembers %s as a version it rolled back from: %+v", a.n, v, s)
		}
	}
	if _, err := os.Stat(f.pwned); err == nil {
		t.Fatalf("a hostile release ran: %s exists", f.pwned)
	}
	f.noHalt(t, t0)
}

// installs waits, once an attack has stopped, for v to be installed
// everywhere and checks the hold ended by itself (a "resumed" event) and
// nothing halted since t0.
func (f *fleet) installs(t *testing.T, v string, t0 time.Time) {
	t.Helper()
	f.waitDone(v)
	// The controller publishes "resumed" as the group moves on; the
	// subscription may hear it a moment after the status is read.
	if err := natstest.Within(5*time.Second, func() error {
		if !hasEvent(f.eventsSince(t0), rollout.EventResumed) {
			return fmt.Errorf("no resumed event since the hold")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	f.noHalt(t, t0)
	if st := f.statuses()[group]; st.FailedCount != 0 || st.Held != "" {
		t.Errorf("done on %s: failed_count %d, held %q; want none", v, st.FailedCount, st.Held)
	}
	f.running()
}

func (f *fleet) noHalt(t *testing.T, t0 time.Time) {
	t.Helper()
	for _, ev := range f.eventsSince(t0) {
		if ev.Kind == rollout.EventHalt {
			t.Errorf("group %s halted: %s", ev.Group, ev.Reason)
		}
	}
}

func hasEvent(events []rollout.Event, kind rollout.EventKind) bool {
	for _, ev := range events {
		if ev.Group == group && ev.Kind == kind {
			return true
		}
	}
	return false
}
