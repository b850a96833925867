package main

// The host side (docs/PERFORMANCE.md §5): how long the real agentd binary
// takes to roll back a release whose health check fails (rollback), and
// what agentd costs a host while nothing happens (idle). Both run
// `agentd run` on a temp root against an embedded server, a release site
// on loopback (test/releases) and an app that this program also is (app):
// a child process of agentd with a real HTTP health endpoint.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/releases"
)

// goodVersion is the release every host starts on; it stays healthy.
const goodVersion = "1.0.0"

// app is the stand-in app: it answers GET /healthz with its version and
// the status -health says, and dies on SIGTERM (Go's default).
func app(args []string) error {
	fs := flag.NewFlagSet("app", flag.ExitOnError)
	addr := fs.String("addr", "", "listen address")
	version := fs.String("version", "", "the version it answers with")
	health := fs.String("health", "ok", "what /healthz does: ok (200), 503, or hang (accepts, never answers)")
	fs.Parse(args)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		switch *health {
		case "ok":
			fmt.Fprintln(w, *version)
		case "hang":
			<-r.Context().Done()
		default:
			http.Error(w, *version+" unhealthy", http.StatusServiceUnavailable)
		}
	})
	return http.ListenAndServe(*addr, mux)
}

// host is one agentd run on a temp root, its bus and its release site.
type host struct {
	dir, root     string
	fleet         *kv.Fleet
	nc            *nats.Conn
	site          *releases.Server
	appAddr       string // where the app's /healthz listens
	exe           string // this program, the app of every release
	healthTimeout time.Duration
	agentd        *exec.Cmd
	exited        chan struct{}
	agentdLog     string
	cleanups      []func()
}

// startHost starts the bus, the release site and `agentd enable` then
// `agentd run --app app` (the binary bin) with health checked on the app's
// /healthz, and waits until goodVersion is installed and running.
// healthTimeout is the group's health_timeout.
func startHost(ctx context.Context, bin string, healthTimeout time.Duration) (h *host, err error) {
	if bin == "" {
		return nil, fmt.Errorf("-agentd is required (go build -o /tmp/agentd ./cmd/agentd)")
	}
	h = &host{healthTimeout: healthTimeout}
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	if h.dir, err = os.MkdirTemp("", "fleetbench-host-"); err != nil {
		return h, err
	}
	h.cleanups = append(h.cleanups, func() { os.RemoveAll(h.dir) })
	h.root = filepath.Join(h.dir, "root")
	if h.exe, err = os.Executable(); err != nil {
		return h, err
	}
	_, url, stop, err := startServerConf("", false)
	if err != nil {
		return h, err
	}
	h.cleanups = append(h.cleanups, stop)
	if h.nc, _, h.fleet, err = openFleet(ctx, url); err != nil {
		return h, err
	}
	h.cleanups = append(h.cleanups, h.nc.Close)
	h.site = releases.NewServer(nil)
	siteSrv := httptest.NewServer(h.site)
	h.cleanups = append(h.cleanups, siteSrv.Close)
	// The app's port: free now, taken by each version in turn.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return h, err
	}
	h.appAddr = ln.Addr().String()
	ln.Close()

	flags := []string{"--root", h.root, "--bin-dir", filepath.Join(h.root, "bin"), "--nats", url, "--log-format", "json"}
	enable := append([]string{"enable", "--group", "bench", "--url-template", releases.URLTemplate(siteSrv.URL),
		"--process", "app", "--health-url", "http://" + h.appAddr + "/healthz"}, flags...)
	if out, err := exec.CommandContext(ctx, bin, enable...).CombinedOutput(); err != nil {
		return h, fmt.Errorf("agentd enable: %w: %s", err, out)
	}
	if err := h.publish(goodVersion, "ok"); err != nil {
		return h, err
	}
	// The baseline is not what is measured: it gets a health_timeout a
	// loaded machine cannot miss (a 1s one failed the first start of the
	// app under a parallel test run), the runs then the host's own.
	measured := h.healthTimeout
	h.healthTimeout = max(measured, 30*time.Second)
	err = h.setPlan(ctx, goodVersion)
	h.healthTimeout = measured
	if err != nil {
		return h, err
	}
	h.agentdLog = filepath.Join(h.dir, "agentd.log")
	logf, err := os.Create(h.agentdLog)
	if err != nil {
		return h, err
	}
	h.agentd = exec.Command(bin, append([]string{"run"}, flags...)...)
	h.agentd.Stdout, h.agentd.Stderr = logf, logf
	if err := h.agentd.Start(); err != nil {
		logf.Close()
		return h, err
	}
	h.exited = make(chan struct{})
	go func() { h.agentd.Wait(); logf.Close(); close(h.exited) }()
	// Stopped before the rest: it stops its app on the way out.
	h.cleanups = append(h.cleanups, func() {
		h.agentd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.exited:
		case <-time.After(30 * time.Second):
			h.agentd.Process.Kill()
			<-h.exited
		}
	})
	return h, h.waitServing(ctx, goodVersion, time.Now().Add(time.Minute))
}

// close stops agentd, then the release site, the bus, and removes the temp
// dir.
func (h *host) close() {
	for _, f := range slices.Backward(h.cleanups) {
		f()
	}
}

// publish adds version v to the release site: bin/app runs this program's
// app mode with -health health.
func (h *host) publish(v, health string) error {
	return h.site.AddScript(v, fmt.Sprintf("#!/bin/sh\nexec %s app -addr %s -version %s -health %s\n",
		strconv.Quote(h.exe), h.appAddr, v, health))
}

// setPlan tells group bench to run target now, with start goodVersion, the
// host's health_timeout, min_healthy_time 1s and no jitter.
func (h *host) setPlan(ctx context.Context, target string) error {
	spec := rollout.DefaultSpec(goodVersion, target)
	var rev uint64
	if e, err := kv.Get[rollout.Spec](ctx, h.fleet.Plan, kv.KeySpec); err == nil {
		rev = e.Revision
	}
	if _, err := kv.Save(ctx, h.fleet.Plan, kv.KeySpec, spec, rev); err != nil {
		return err
	}
	st := rollout.GroupStatus{V: 1, Group: "bench", State: rollout.StateDone, TargetVersion: target, StartVersion: goodVersion,
		Progress: 1, Mode: rollout.ModeEnabled, HealthTimeout: rollout.Duration(h.healthTimeout), MinHealthyTime: rollout.Duration(time.Second)}
	rev = 0
	if e, err := kv.Get[rollout.GroupStatus](ctx, h.fleet.Plan, kv.GroupKey("bench")); err == nil {
		rev = e.Revision
	}
	_, err := kv.Save(ctx, h.fleet.Plan, kv.GroupKey("bench"), st, rev)
	return err
}

// state is update.yaml's status and the install journal (nil: none open).
func (h *host) state() (install.Status, *install.Journal, error) {
	uf, err := install.LoadUpdateFile(h.root)
	if err != nil {
		return install.Status{}, nil, err
	}
	j, err := install.LoadJournal(install.Tree{Root: h.root})
	return uf.Status, j, err
}

// poll calls cond every 10 ms until it is true or fails, agentd exits, or
// deadline passes.
func (h *host) poll(ctx context.Context, deadline time.Time, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not by the deadline; agentd log:\n%s", what, h.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.exited:
			return fmt.Errorf("%s: agentd exited (%v); log:\n%s", what, h.agentd.ProcessState, h.logTail())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitServing waits until v is installed, no install is open, and the app
// answers /healthz with v.
func (h *host) waitServing(ctx context.Context, v string, deadline time.Time) error {
	client := &http.Client{Timeout: time.Second}
	return h.poll(ctx, deadline, v+" installed and answering", func() (bool, error) {
		st, j, err := h.state()
		if err != nil || st.ActiveVersion != v || j != nil && j.Step != install.StepUndone {
			return false, nil
		}
		resp, err := client.Get("http://" + h.appAddr + "/healthz")
		if err != nil {
			return false, nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == v, nil
	})
}

func (h *host) logTail() string {
	b, _ := os.ReadFile(h.agentdLog)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// rollbackTimes is one failed install, timed.
type rollbackTimes struct {
	fromHealth time.Duration // health wait start → rollback recorded
	fromStart  time.Duration // install start → rollback recorded
	serving    time.Duration // health wait start → goodVersion answering again
}

// failOnce publishes v with a failing health check, points the plan at
// it, and times the rollback. The start is agentd's own record: the
// journal's step "health", written (and fsynced) just before the health
// wait begins, its updated_at; the install's start is the journal's
// started_at. The end is the first poll (every 10 ms) that sees update.yaml
// record the rollback (goodVersion active, rollback_from v) with the
// journal closed; agentd saves that after the links point at goodVersion
// again and its app was restarted.
func (h *host) failOnce(ctx context.Context, v, health string) (rollbackTimes, error) {
	var t rollbackTimes
	if err := h.publish(v, health); err != nil {
		return t, err
	}
	if err := h.setPlan(ctx, v); err != nil {
		return t, err
	}
	deadline := time.Now().Add(h.healthTimeout + 2*time.Minute)
	var healthAt, startAt time.Time
	err := h.poll(ctx, deadline, "rollback from "+v, func() (bool, error) {
		st, j, err := h.state()
		if err != nil {
			return false, nil // being replaced: read again
		}
		if j != nil && j.Target == v && j.Step == install.StepHealth {
			healthAt, startAt = j.UpdatedAt, j.StartedAt
		}
		if st.ActiveVersion != goodVersion || !st.Rollback || st.RollbackFrom != v || j != nil {
			return false, nil
		}
		if healthAt.IsZero() {
			return false, fmt.Errorf("rolled back from %s, but no health wait was seen (error: %s)", v, st.Error)
		}
		now := time.Now()
		t.fromHealth, t.fromStart = now.Sub(healthAt), now.Sub(startAt)
		return true, nil
	})
	if err != nil {
		return t, err
	}
	link, err := os.Readlink(filepath.Join(h.root, "bin", "app"))
	if err != nil || !strings.Contains(link, filepath.Join("versions", goodVersion, "bin")) {
		return t, fmt.Errorf("after the rollback from %s bin/app -> %q (%v), want %s's", v, link, err, goodVersion)
	}
	if err := h.waitServing(ctx, goodVersion, deadline); err != nil {
		return t, err
	}
	t.serving = time.Since(healthAt)
	return t, nil
}

// rollback: -runs installs of a release whose health check fails, each
// rolled back by the real agentd; the bound is health_timeout + 2 s, p99.
func rollback(args []string) error {
	fs := flag.NewFlagSet("rollback", flag.ExitOnError)
	bin := fs.String("agentd", "", "agentd binary (go build -o /tmp/agentd ./cmd/agentd)")
	runs := fs.Int("runs", 20, "failed installs to roll back")
	timeout := fs.Duration("health-timeout", 3*time.Second, "the group's health_timeout")
	bad := fs.String("bad-health", "503", "how the failing release's /healthz fails: 503, or hang (accepts, never answers)")
	fs.Parse(args)
	if *bad != "503" && *bad != "hang" {
		return fmt.Errorf("-bad-health %q: want 503 or hang", *bad)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*runs+1)*(*timeout+2*time.Minute))
	defer cancel()
	h, err := startHost(ctx, *bin, *timeout)
	if err != nil {
		return err
	}
	defer h.close()
	fmt.Printf("rollback: %d runs, health_timeout %v, the failing release's /healthz: %s; agentd %s, health probed every 1s\n", *runs, *timeout, *bad, *bin)
	var fromHealth, fromStart, serving []time.Duration
	for i := range *runs {
		v := fmt.Sprintf("2.0.%d", i)
		t, err := h.failOnce(ctx, v, *bad)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		fromHealth, fromStart, serving = append(fromHealth, t.fromHealth), append(fromStart, t.fromStart), append(serving, t.serving)
		fmt.Printf("run %2d (%s): health wait start → rollback recorded %v; install start → recorded %v; health wait start → %s answering %v\n",
			i+1, v, ms(t.fromHealth), ms(t.fromStart), goodVersion, ms(t.serving))
	}
	bound := *timeout + 2*time.Second
	verdict := "PASS"
	if percentile(fromHealth, 0.99) > bound {
		verdict = "FAIL"
	}
	fmt.Printf("health wait start → rollback recorded: %s; bound health_timeout + 2s = %v: %s\n", summary(fromHealth), bound, verdict)
	fmt.Printf("install start → rollback recorded:     %s\n", summary(fromStart))
	fmt.Printf("health wait start → %s answering:   %s\n", goodVersion, summary(serving))
	return nil
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// percentile is the nearest-rank p-quantile of ds (p99 of 20 is the max).
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[max(0, int(math.Ceil(p*float64(len(s))))-1)]
}

func summary(ds []time.Duration) string {
	return fmt.Sprintf("p50 %v, p99 %v, max %v (n=%d)", ms(percentile(ds, 0.5)), ms(percentile(ds, 0.99)), ms(slices.Max(ds)), len(ds))
}

// procSample is one reading of a process's CPU time and resident memory.
type procSample struct {
	at   time.Time
	cpu  time.Duration // utime + stime
	rss  int64         // VmRSS, KiB
	anon int64         // RssAnon, KiB: the rest is the binary's pages (RssFile)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

func sampleProc(pid int) (procSample, error) {
	s := procSample{at: time.Now()}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// After "pid (comm) ": state is field 3, utime 14, stime 15.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return s, err
	}
	s.cpu = time.Duration(ut+st) * time.Second / clockTicks
	if b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err != nil {
		return s, err
	}
	for l := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(l, ":")
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			s.rss = n
		case "RssAnon":
			s.anon = n
		}
	}
	if s.rss == 0 {
		return s, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return s, nil
}

// idle: agentd with a version installed and running, nothing to do, for
// -duration: its RSS and CPU use, sampled from /proc every -every.
func idle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	bin := fs.String("agentd", "", "agentd binary (go build -o /tmp/agentd ./cmd/agentd)")
	duration := fs.Duration("duration", 10*time.Minute, "how long to sample")
	every := fs.Duration("every", 5*time.Second, "time between samples")
	settle := fs.Duration("settle", 10*time.Second, "wait this long after the install before sampling")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), *duration+*settle+5*time.Minute)
	defer cancel()
	h, err := startHost(ctx, *bin, 10*time.Second)
	if err != nil {
		return err
	}
	defer h.close()
	var beats atomic.Int64
	sub, err := h.nc.Subscribe(kv.HBSubjects, func(*nats.Msg) { beats.Add(1) })
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	pid := h.agentd.Process.Pid
	fmt.Printf("idle: agentd %s (pid %d) running %s (--app, health URL), default heartbeat interval; settling %v, then sampling every %v for %v\n",
		*bin, pid, goodVersion, *settle, *every, *duration)
	time.Sleep(*settle)
	first, err := sampleProc(pid)
	if err != nil {
		return err
	}
	beats.Store(0)
	last, maxRSS, maxAnon := first, first.rss, first.anon
	for last.at.Sub(first.at) < *duration {
		select {
		case <-h.exited:
			return fmt.Errorf("agentd exited while idle; log:\n%s", h.logTail())
		case <-time.After(*every):
		}
		s, err := sampleProc(pid)
		if err != nil {
			return err
		}
		fmt.Printf("  +%-6v VmRSS %5.1f MiB (anon %4.1f)  CPU %v (%.3f%% of a core since the last sample)\n", s.at.Sub(first.at).Round(time.Second),
			mib(s.rss), mib(s.anon), s.cpu, 100*(s.cpu-last.cpu).Seconds()/s.at.Sub(last.at).Seconds())
		last, maxRSS, maxAnon = s, max(maxRSS, s.rss), max(maxAnon, s.anon)
	}
	wall, cpu := last.at.Sub(first.at), last.cpu-first.cpu
	pct := 100 * cpu.Seconds() / wall.Seconds()
	fmt.Printf("idle agentd over %v: VmRSS max %.1f MiB, last %.1f MiB (first %.1f MiB; of it anonymous: max %.1f MiB); CPU %v = %.3f%% of one core, %.4f%% of the machine's %d; %d heartbeats\n",
		wall.Round(time.Second), mib(maxRSS), mib(last.rss), mib(first.rss), mib(maxAnon), cpu, pct, pct/float64(runtime.NumCPU()), runtime.NumCPU(), beats.Load())
	verdict := "PASS"
	switch {
	case wall < 10*time.Minute:
		verdict = "not judged (the bound is over 10 minutes; CPU time counts in 10 ms ticks)"
	case mib(maxRSS) > 20 || pct > 0.1:
		verdict = "FAIL"
	}
	fmt.Printf("bound: ≤ 20 MiB RSS and ≤ 0.1%% CPU (of one core) over 10 minutes: %s\n", verdict)
	return nil
}

func mib(kib int64) float64 { return float64(kib) / 1024 }
