package agentd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/test/releases"
)

// brokenSite is a release site that can be down (every request answers
// 503) or serve a wrong checksum for one version; it counts the install
// attempts per version (each starts with a HEAD of the tarball).
type brokenSite struct {
	http.Handler
	mu      sync.Mutex
	down    bool
	badSum  string // version whose .sha256 is wrong
	attempt map[string]int
}

func (s *brokenSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	version, file, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	s.mu.Lock()
	if r.Method == http.MethodHead && file == "app.tar.gz" {
		s.attempt[version]++
	}
	down, bad := s.down, s.badSum == version
	s.mu.Unlock()
	switch {
	case down:
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	case bad && file == "app.tar.gz.sha256":
		fmt.Fprintf(w, "%s  app.tar.gz\n", strings.Repeat("0", 64))
	default:
		s.Handler.ServeHTTP(w, r)
	}
}

func (s *brokenSite) set(down bool, badSum string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down, s.badSum = down, badSum
}

func (s *brokenSite) attempts(version string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempt[version]
}

// classEnv is an agent of group blue on a manual clock, installing from a
// brokenSite.
type classEnv struct {
	t     *testing.T
	ctx   context.Context
	fleet *kv.Fleet
	site  *brokenSite
	clk   *clock.Manual
	a     *agentd.Agent
	root  string
	logs  *natstest.Buffer
	srv   *natstest.Server
}

func startClassEnv(t *testing.T, setup func(*agentd.Agent)) *classEnv {
	t.Helper()
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	rs := releases.NewServer(nil)
	for _, v := range []string{"2.0.0", "3.0.0"} {
		if err := rs.Add(v, releases.Good); err != nil {
			t.Fatal(err)
		}
	}
	site := &brokenSite{Handler: rs, attempt: map[string]int{}}
	rel := httptest.NewServer(site)
	t.Cleanup(rel.Close)

	root := t.TempDir()
	uf := install.NewUpdateFile("blue")
	uf.Spec.Enabled = true
	if err := uf.Save(root); err != nil {
		t.Fatal(err)
	}
	e := &classEnv{t: t, ctx: ctx, fleet: fleet, site: site, clk: clock.NewManual(time.Now()), root: root, logs: &natstest.Buffer{}, srv: srv}
	e.a, err = agentd.New(agentd.Options{
		Root: root, NATSURL: srv.URL(), Interval: time.Hour, Clock: e.clk,
		Log: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		App: agentd.AppOptions{URLTemplate: releases.URLTemplate(rel.URL), BinDir: filepath.Join(root, "bin"), Process: "app"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(e.a)
	}
	done := make(chan error, 1)
	go func() { done <- e.a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("agent ended with %v", err)
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", e.logs.String())
		}
	})
	return e
}

// failedBeat waits until update.yaml and the heartbeat of the same
// attempt (same start_time) report a failure of class, and checks that
// neither remembers the version as bad.
func (e *classEnv) failedBeat(class, cause string) *heartbeat.Heartbeat {
	e.t.Helper()
	var got *heartbeat.Heartbeat
	var st install.Status
	natstest.Eventually(e.t, 20*time.Second, func() error {
		st = e.updateFile()
		if string(st.ErrorClass) != class || st.ErrorCause != cause || st.Error == "" {
			return fmt.Errorf("update.yaml status %+v, want error_class %q, error_cause %q", st, class, cause)
		}
		hb, err := lastHeartbeat(e.ctx, e.fleet)
		if err != nil {
			return err
		}
		if hb.ErrorClass != class || hb.ErrorCause != cause || hb.UpdatingTo != "" || !hb.StartTime.Equal(st.StartTime) {
			return fmt.Errorf("heartbeat error_class %q error_cause %q error %q updating_to %q start_time %v, want %q %q of the attempt at %v",
				hb.ErrorClass, hb.ErrorCause, hb.Error, hb.UpdatingTo, hb.StartTime, class, cause, st.StartTime)
		}
		got = hb
		return nil
	})
	if got.Rollback || got.RollbackFrom != "" {
		e.t.Errorf("heartbeat remembers a rollback (rollback %v, rollback_from %q): the version would be skipped", got.Rollback, got.RollbackFrom)
	}
	if st.Rollback || st.RollbackFrom != "" {
		e.t.Errorf("update.yaml status %+v remembers a rollback: the version would be skipped", st)
	}
	return got
}

// decidedAgain republishes the plan (same target) and waits until the
// agent, deciding on it, logs msg; the site must not be asked for 2.0.0
// again meanwhile (attempts so far).
func (e *classEnv) decidedAgain(msg string, attempts int) {
	e.t.Helper()
	from := len(e.logs.String())
	setPlan(e.t, e.ctx, e.fleet, "1.0.0", "2.0.0")
	natstest.Eventually(e.t, 10*time.Second, func() error {
		if got := e.site.attempts("2.0.0"); got != attempts {
			e.t.Fatalf("the plan change (same target) made the agent try 2.0.0 again before it was due: %d attempts, want %d", got, attempts)
		}
		if !strings.Contains(e.logs.String()[from:], msg) {
			return fmt.Errorf("the agent has not logged %q after the plan change", msg)
		}
		return nil
	})
}

func (e *classEnv) updateFile() install.Status {
	e.t.Helper()
	uf, err := install.LoadUpdateFile(e.root)
	if err != nil {
		e.t.Fatal(err)
	}
	return uf.Status
}

var retryLine = regexp.MustCompile(`msg="install blocked by an infrastructure failure; retrying later" version=(\S+) cause="([^"]*)" attempt=(\d+) retry_in=(\S+)`)

// retryIn waits for the agent's log of its attempt-th infrastructure
// failure and returns the wait it chose.
func (e *classEnv) retryIn(attempt int) time.Duration {
	e.t.Helper()
	var d time.Duration
	natstest.Eventually(e.t, 20*time.Second, func() error {
		for _, m := range retryLine.FindAllStringSubmatch(e.logs.String(), -1) {
			if n, _ := strconv.Atoi(m[3]); n == attempt {
				var err error
				d, err = time.ParseDuration(m[4])
				return err
			}
		}
		return fmt.Errorf("no retry scheduled after attempt %d yet", attempt)
	})
	return d
}

// installed advances the clock (health checks wait on it) until the
// agent reports version installed without an error.
func (e *classEnv) installed(version string) {
	e.t.Helper()
	natstest.Eventually(e.t, 30*time.Second, func() error {
		e.clk.Advance(200 * time.Millisecond)
		hb, err := lastHeartbeat(e.ctx, e.fleet)
		if err != nil {
			return err
		}
		if hb.ActiveVersion != version || hb.Error != "" || hb.ErrorClass != "" || hb.ErrorCause != "" || hb.Rollback {
			return fmt.Errorf("heartbeat %+v, want %s installed", hb, version)
		}
		return nil
	})
}

// TestAgentRetriesInfrastructureFailure (issue 15 point 1): the release
// site answers 503. The agent reports class infrastructure ("blocked:
// download failed (HTTP 503)"), retries after 30s, 60s, 120s (±20%), not
// before, never remembers the version as bad, and installs it once the
// site is back.
func TestAgentRetriesInfrastructureFailure(t *testing.T) {
	e := startClassEnv(t, nil)
	e.site.set(true, "")
	setPlan(t, e.ctx, e.fleet, "1.0.0", "2.0.0")

	hb := e.failedBeat(heartbeat.ClassInfrastructure, "download failed (HTTP 503)")
	if got, want := view.AgentState(hb, e.clk.Now()), "blocked: download failed (HTTP 503)"; got != want {
		t.Errorf("agents ls STATE %q, want %q", got, want)
	}
	for attempt, nominal := range []time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second} {
		attempt++
		wait := e.retryIn(attempt)
		if lo, hi := nominal*8/10, nominal*12/10; wait < lo || wait > hi {
			t.Fatalf("retry %d after %v, want %v ±20%%", attempt, wait, nominal)
		}
		if got := e.site.attempts("2.0.0"); got != attempt {
			t.Fatalf("%d attempts at the site after %d failures: the agent retried early", got, attempt)
		}
		// A second before it is due (past the agent's one-minute recheck
		// for the longer waits), a plan change makes the agent decide
		// again: it does not try yet. Then it is due.
		e.clk.Advance(wait - time.Second)
		e.decidedAgain("retry after an infrastructure failure not due yet", attempt)
		e.clk.Advance(time.Second)
		natstest.Eventually(t, 20*time.Second, func() error {
			if got := e.site.attempts("2.0.0"); got != attempt+1 {
				return fmt.Errorf("%d attempts, want %d", got, attempt+1)
			}
			return nil
		})
		if attempt < 3 {
			e.failedBeat(heartbeat.ClassInfrastructure, "download failed (HTTP 503)")
		}
	}
	// The fourth attempt met the site back up.
	e.site.set(false, "")
	e.retryIn(4)
	e.clk.Advance(retryCapForTest)
	e.installed("2.0.0")
	if got := e.site.attempts("2.0.0"); got != 5 {
		t.Errorf("%d attempts, want 5 (4 failed, 1 installed)", got)
	}
}

// TestHeartbeatsStayBlockedDuringRetry: while a retry of a blocked install
// runs and has not got past what blocked it, the heartbeats still say
// blocked (class infrastructure, the cause), not "updating" with no error:
// a group held on its blocked agents would otherwise resume and hold again
// at every retry. Once the site answers, the install goes through.
func TestHeartbeatsStayBlockedDuringRetry(t *testing.T) {
	e := startClassEnv(t, nil)
	var mu sync.Mutex
	var beats []heartbeat.Heartbeat
	nc := e.srv.Conn("watcher")
	if _, err := nc.Subscribe(heartbeat.SubjectPrefix+"blue.>", func(m *nats.Msg) {
		if hb, err := heartbeat.DecodeFrom(m.Subject, m.Data); err == nil {
			mu.Lock()
			beats = append(beats, *hb)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	e.site.set(true, "")
	setPlan(t, e.ctx, e.fleet, "1.0.0", "2.0.0")
	e.failedBeat(heartbeat.ClassInfrastructure, "download failed (HTTP 503)")
	for attempt := 1; attempt <= 3; attempt++ {
		e.clk.Advance(e.retryIn(attempt))
		natstest.Eventually(t, 20*time.Second, func() error {
			if got := e.site.attempts("2.0.0"); got != attempt+1 {
				return fmt.Errorf("%d attempts, want %d", got, attempt+1)
			}
			return nil
		})
		e.failedBeat(heartbeat.ClassInfrastructure, "download failed (HTTP 503)")
	}
	mu.Lock()
	first, retrying := -1, 0
	for i, hb := range beats {
		if first < 0 && hb.ErrorClass == heartbeat.ClassInfrastructure {
			first = i
		}
		if first < 0 || hb.UpdatingTo == "" {
			continue
		}
		retrying++
		if hb.ErrorClass != heartbeat.ClassInfrastructure || hb.ErrorCause != "download failed (HTTP 503)" || hb.Error == "" {
			t.Errorf("heartbeat %d during a retry: updating_to %q, error %q, class %q, cause %q; want still blocked on HTTP 503",
				i, hb.UpdatingTo, hb.Error, hb.ErrorClass, hb.ErrorCause)
		}
	}
	mu.Unlock()
	if retrying == 0 {
		t.Fatalf("no heartbeat during the 3 retries said updating_to: nothing was checked")
	}
	e.site.set(false, "")
	e.clk.Advance(e.retryIn(4))
	e.installed("2.0.0")
}

// retryCapForTest is past any retry wait (10 minutes + 20%).
const retryCapForTest = 12 * time.Minute

// TestAgentDoesNotRetryBadArtifact: the site serves a checksum that does not
// match. The agent reports class artifact ("artifact: checksum mismatch")
// and does not try again, however long it waits, until the target changes.
func TestAgentDoesNotRetryBadArtifact(t *testing.T) {
	e := startClassEnv(t, nil)
	e.site.set(false, "2.0.0")
	setPlan(t, e.ctx, e.fleet, "1.0.0", "2.0.0")

	hb := e.failedBeat(heartbeat.ClassArtifact, "checksum mismatch")
	if got, want := view.AgentState(hb, e.clk.Now()), "artifact: checksum mismatch"; got != want {
		t.Errorf("agents ls STATE %q, want %q", got, want)
	}
	if !strings.Contains(hb.Error, "checksum mismatch") {
		t.Errorf("heartbeat error %q does not say what failed", hb.Error)
	}
	// Long past any infrastructure retry, a plan change (same target)
	// makes the agent decide again: it does not try.
	for range 12 {
		e.clk.Advance(61 * time.Second)
	}
	e.decidedAgain("not retrying a release that failed verification", 1)
	e.decidedAgain("still not retrying a release that failed verification", 1)
	e.failedBeat(heartbeat.ClassArtifact, "checksum mismatch")

	// A new target is installed; the bad one was tried once.
	setPlan(t, e.ctx, e.fleet, "1.0.0", "3.0.0")
	e.installed("3.0.0")
	if got := e.site.attempts("2.0.0"); got != 1 {
		t.Errorf("%d attempts at 2.0.0, want 1 (an artifact failure is not retried)", got)
	}
}

// TestAgentDiskFullIsBlocked: the host's disk is too full for the release
// (statfs seam). The agent shows "blocked: disk full", does not mark the
// version bad, and installs it once space is freed.
func TestAgentDiskFullIsBlocked(t *testing.T) {
	var mu sync.Mutex
	free := uint64(1 << 20)
	e := startClassEnv(t, func(a *agentd.Agent) {
		agentd.SetFreeSpace(a, func(string) (uint64, error) {
			mu.Lock()
			defer mu.Unlock()
			return free, nil
		})
	})
	setPlan(t, e.ctx, e.fleet, "1.0.0", "2.0.0")
	hb := e.failedBeat(heartbeat.ClassInfrastructure, "disk full")
	if got, want := view.AgentState(hb, e.clk.Now()), "blocked: disk full"; got != want {
		t.Errorf("agents ls STATE %q, want %q", got, want)
	}
	if !strings.Contains(hb.Error, "not enough free space") {
		t.Errorf("heartbeat error %q does not say what failed", hb.Error)
	}
	e.retryIn(1)
	mu.Lock()
	free = 1 << 40
	mu.Unlock()
	e.clk.Advance(retryCapForTest)
	e.installed("2.0.0")
}

// TestStatusShowsFailureClass, through the agentd binary: 'agentd update'
// against a release site that answers 503 fails, records the class and
// cause in update.yaml, and 'agentd status' shows them; the version is not
// remembered as rolled back from. (systemd would run the app: never reached.)
func TestStatusShowsFailureClass(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx := context.Background()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	rs := releases.NewServer(nil)
	if err := rs.Add("2.0.0", releases.Good); err != nil {
		t.Fatal(err)
	}
	site := &brokenSite{Handler: rs, attempt: map[string]int{}, down: true}
	rel := httptest.NewServer(site)
	t.Cleanup(rel.Close)
	setPlan(t, ctx, fleet, "1.0.0", "2.0.0")

	root := t.TempDir()
	_, stderr, code := execAgentd(t, bin, "update", "--force", "--root", root, "--nats", srv.URL(), "--group", "blue",
		"--url-template", releases.URLTemplate(rel.URL), "--systemd-unit", "app.service", "--bin-dir", filepath.Join(root, "bin"), "--log-level", "error")
	if code != 1 || !strings.Contains(stderr, "503 Service Unavailable") {
		t.Fatalf("agentd update against a site that answers 503: exit %d, want 1 naming the 503:\n%s", code, stderr)
	}
	stdout, stderr, code := execAgentd(t, bin, "status", "--root", root)
	if code != 0 {
		t.Fatalf("agentd status: exit %d:\n%s", code, stderr)
	}
	var rep agentd.StatusReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("agentd status is not JSON: %v\n%s", err, stdout)
	}
	if rep.ErrorClass != "infrastructure" || rep.ErrorCause != "download failed (HTTP 503)" || rep.Rollback || rep.RollbackFrom != "" || rep.Error == "" {
		t.Errorf("agentd status: error_class %q, error_cause %q, rollback %v %q, error %q; want infrastructure, download failed (HTTP 503), no rollback",
			rep.ErrorClass, rep.ErrorCause, rep.Rollback, rep.RollbackFrom, rep.Error)
	}
	for _, want := range []string{`"error_class": "infrastructure"`, `"error_cause": "download failed (HTTP 503)"`} {
		if !strings.Contains(stdout, want) {
			t.Errorf("agentd status lacks %s:\n%s", want, stdout)
		}
	}
}

// TestHeartbeatLeavesOutUnknownClass: an update.yaml written by a newer
// agentd, with a class this build does not know, loads, and the heartbeat
// leaves the class out rather than sending one the controller refuses.
func TestHeartbeatLeavesOutUnknownClass(t *testing.T) {
	for _, tc := range []struct {
		class, wantClass, wantCause string
	}{
		{"weather", "", ""},
		{"infrastructure", "infrastructure", "disk full"},
	} {
		t.Run(tc.class, func(t *testing.T) {
			root := t.TempDir()
			uf := install.NewUpdateFile("blue")
			uf.Status = install.Status{Error: "install 2.0.0: boom", ErrorClass: install.FailureClass(tc.class), ErrorCause: "disk full"}
			if err := uf.Save(root); err != nil {
				t.Fatal(err)
			}
			a, err := agentd.New(agentd.Options{Root: root, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			hb := a.Heartbeat()
			hb.V, hb.At = heartbeat.SchemaVersion, time.Now()
			if _, err := heartbeat.Encode(&hb); err != nil {
				t.Fatalf("heartbeat does not encode: %v", err)
			}
			if hb.ErrorClass != tc.wantClass || hb.ErrorCause != tc.wantCause || hb.Error == "" {
				t.Errorf("heartbeat error %q class %q cause %q, want class %q cause %q", hb.Error, hb.ErrorClass, hb.ErrorCause, tc.wantClass, tc.wantCause)
			}
		})
	}
}
