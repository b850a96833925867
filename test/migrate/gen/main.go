//go:build fw298d45f

// Command gen makes test/migrate/testdata: a single-app fleet's bus, written
// by the code of commit 298d45f (the last commit before issue 26's apps), in
// the middle of a rollout. It builds nothing itself: it runs that commit's
// controller and fleetctl binaries and heartbeats like that commit's agentd
// (heartbeat.Encode on fleet.hb.<group>.<id>, each agent with its own creds
// and inbox prefix, JetStream-acked), so the store holds exactly what a
// fleet of today's code would have on disk.
//
// It compiles only at 298d45f (the build tag keeps it out of every later
// build). To make the fixture again:
//
//	git worktree add /tmp/fw-old 298d45f
//	mkdir -p /tmp/fw-old/test/migrate/gen
//	cp test/migrate/gen/main.go /tmp/fw-old/test/migrate/gen/
//	cd /tmp/fw-old && go build -o bin/ ./cmd/... &&
//	  go run -tags fw298d45f ./test/migrate/gen -bin bin -out /tmp/fw-fixture
//	# then copy /tmp/fw-fixture/{store.tar.gz,auth.tar.gz,fixture.json} to test/migrate/testdata/
//
// The fleet: groups canary -> prod -> edge (each depends on the one
// before), 10 agents (2 / 5 / 3), plan 1.0.0 -> 1.1.0 critical. The agents
// follow rollout.Decide on the plan as the controller writes it; canary
// completes (done), prod is stopped with 2 of its 5 hosts on 1.1.0
// (active), edge never starts (unstarted). 1.0.9 is quarantined. The
// controller is then stopped (SIGTERM) and the store packed.
package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Fixture is fixture.json: what the store holds, for the migration test.
type Fixture struct {
	Commit     string                  `json:"commit"`
	ControlID  string                  `json:"controller_id"`
	Made       time.Time               `json:"made"`
	Start      string                  `json:"start_version"`
	Target     string                  `json:"target_version"`
	Quarantine string                  `json:"quarantined_version"`
	SpecRev    uint64                  `json:"spec_revision"`
	ConfigRev  uint64                  `json:"config_revision"`
	Groups     map[string]FixtureGroup `json:"groups"`
	Agents     []FixtureAgent          `json:"agents"`
}

// FixtureGroup is one group's status when the controller stopped.
type FixtureGroup struct {
	State    string `json:"state"`
	Revision uint64 `json:"revision"`
}

// FixtureAgent is one agent: its id, group, version and creds file (under
// the auth dir).
type FixtureAgent struct {
	ID      string `json:"id"`
	Group   string `json:"group"`
	Version string `json:"version"`
	Creds   string `json:"creds"`
}

const config = `groups:
  - name: canary
    canary_count: 1
    max_in_flight: 50%
    jitter_seconds: 0
    health_timeout: 10s
    min_healthy_time: 2s
  - name: prod
    depends_on: [canary]
    canary_count: 1
    max_in_flight: 20%
    jitter_seconds: 0
    health_timeout: 10s
    min_healthy_time: 2s
  - name: edge
    depends_on: [prod]
    canary_count: 1
    max_in_flight: 50%
    jitter_seconds: 0
    health_timeout: 10s
    min_healthy_time: 2s
`

const controllerID = "ctl-1"

type agent struct {
	FixtureAgent
	nc *nats.Conn
	js jetstream.JetStream
	hb heartbeat.Heartbeat
}

func main() {
	bin := flag.String("bin", "bin", "directory of this commit's controller and fleetctl")
	out := flag.String("out", "/tmp/fw-fixture", "output directory (must not exist)")
	flag.Parse()
	if err := run(*bin, *out); err != nil {
		log.Fatal(err)
	}
}

func run(bin, out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("%s exists", out)
	}
	bin, _ = filepath.Abs(bin)
	authDir, storeDir := filepath.Join(out, "auth"), filepath.Join(out, "store")
	fleetctl := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "fleetctl"), args...)
		cmd.Stderr = os.Stderr
		cmd.Env = append(os.Environ(), "FLEETCTL_ACTOR=fixture@298d45f")
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("fleetctl %s: %w", strings.Join(args, " "), err)
		}
		return b, nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if _, err := fleetctl("auth", "init", "--dir", authDir); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	ctl := exec.Command(filepath.Join(bin, "controller"), "run", "--auth-dir", authDir, "--store-dir", storeDir,
		"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--id", controllerID, "--heartbeat-interval", "1s",
		"--stats-interval", "1s", "--reconcile-interval", "300ms")
	logf, err := os.Create(filepath.Join(out, "controller.log"))
	if err != nil {
		return err
	}
	ctl.Stdout, ctl.Stderr = logf, logf
	if err := ctl.Start(); err != nil {
		return err
	}
	defer ctl.Process.Kill()

	admin := []string{"--nats", url, "--creds", filepath.Join(authDir, "creds", "admin.creds")}
	nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{URL: url, Creds: filepath.Join(authDir, "creds", "admin.creds"), RetryFirst: true, Log: slog.Default()})
	if err != nil {
		return err
	}
	defer nc.Close()
	var fleet *kv.Fleet
	if err := until(ctx, func() bool { fleet, err = kv.Open(ctx, js); return err == nil }); err != nil {
		return fmt.Errorf("the controller made no buckets: %w", err)
	}
	cfgFile := filepath.Join(out, "fleet.yaml")
	if err := os.WriteFile(cfgFile, []byte(config), 0o644); err != nil {
		return err
	}
	if _, err := fleetctl(append(admin, "config", "apply", "-f", cfgFile, "--reason", "three groups")...); err != nil {
		return err
	}

	// Ten agents, each with its own creds (minted on the bus: audit records).
	var agents []*agent
	for _, g := range []struct {
		name string
		n    int
	}{{"canary", 2}, {"prod", 5}, {"edge", 3}} {
		for i := 0; i < g.n; i++ {
			b, err := fleetctl(append(admin, "auth", "agent", "--dir", authDir, "--group", g.name, "-o", "json", "--reason", "enrol")...)
			if err != nil {
				return err
			}
			var minted struct {
				AgentID string `json:"agent_id"`
			}
			if err := json.Unmarshal(b, &minted); err != nil {
				return err
			}
			a := &agent{FixtureAgent: FixtureAgent{ID: minted.AgentID, Group: g.name, Version: "1.0.0",
				Creds: filepath.Join("agents", minted.AgentID+".creds")}}
			a.nc, a.js, err = natsutil.ConnectJetStream(natsutil.ConnectOptions{URL: url, Name: "agent " + a.ID,
				Creds: filepath.Join(authDir, a.Creds), InboxPrefix: kv.AgentInboxPrefix(a.ID), Log: slog.Default()})
			if err != nil {
				return fmt.Errorf("agent %s connects: %w", a.ID, err)
			}
			defer a.nc.Close()
			a.hb = heartbeat.Heartbeat{AgentID: rollout.AgentID(a.ID), Hostname: fmt.Sprintf("%s-%d", g.name, i+1),
				Group: g.name, ActiveVersion: "1.0.0", UpdaterVersion: "0.0.0-298d45f"}
			agents = append(agents, a)
		}
	}
	beat := func() error {
		for _, a := range agents {
			a.hb.V, a.hb.At, a.hb.Seq = heartbeat.SchemaVersion, time.Now().UTC(), a.hb.Seq+1
			data, err := heartbeat.Encode(&a.hb)
			if err != nil {
				return err
			}
			if _, err := a.js.Publish(ctx, heartbeat.SubjectFor(a.Group, a.hb.AgentID), data); err != nil {
				return fmt.Errorf("agent %s heartbeat: %w", a.ID, err)
			}
		}
		return nil
	}
	counted := func() bool {
		stats, err := fleet.ReadStats(ctx)
		if err != nil {
			return false
		}
		n := 0
		for _, s := range stats {
			n += s.Versions.Total()
		}
		return n == len(agents)
	}
	if err := untilBeating(ctx, beat, counted); err != nil {
		return fmt.Errorf("the controller never counted the 10 agents: %w", err)
	}
	if _, err := fleetctl(append(admin, "plan", "set", "--start", "1.0.0", "--target", "1.1.0", "--critical", "--reason", "release 1.1.0")...); err != nil {
		return err
	}

	// The agents follow the plan: an agent that Decide sends to 1.1.0
	// installs it in one heartbeat (updating_to, then active). prod stops
	// at 2 of 5 on the target; edge never gets the word.
	onTarget := func(g string) int {
		n := 0
		for _, a := range agents {
			if a.Group == g && a.hb.ActiveVersion == "1.1.0" {
				n++
			}
		}
		return n
	}
	stop := func() bool {
		st, err := fleet.ReadState(ctx)
		if err != nil {
			return false
		}
		c, okc := st.Groups["canary"]
		p, okp := st.Groups["prod"]
		e, oke := st.Groups["edge"]
		if !okc || !okp {
			return false
		}
		for _, a := range agents {
			g, ok := st.Groups[a.Group]
			if !ok || a.hb.ActiveVersion == "1.1.0" {
				continue
			}
			if a.Group == "prod" && onTarget("prod") >= 2 {
				continue
			}
			if os.Getenv("GEN_DEBUG") != "" {
				v, ok := rollout.Decide(rollout.AgentID(a.ID), st.Spec.Value, g.Value, g.Value.Mode)
				log.Printf("%s %s state=%s canaries=%v decide=%s,%v", a.Group, a.ID, g.Value.State, g.Value.Canaries, v, ok)
			}
			if v, ok := rollout.Decide(rollout.AgentID(a.ID), st.Spec.Value, g.Value, g.Value.Mode); ok && v == "1.1.0" {
				if a.hb.UpdatingTo == "" {
					a.hb.UpdatingTo = v
				} else {
					a.hb.UpdatingTo, a.hb.ActiveVersion, a.hb.StartVersion, a.hb.StartTime = "", v, "1.0.0", time.Now().UTC()
				}
			}
		}
		return c.Value.State == rollout.StateDone && p.Value.State == rollout.StateActive &&
			onTarget("prod") == 2 && (!oke || e.Value.State == rollout.StateUnstarted) && statsSay(ctx, fleet, "prod", 2)
	}
	if err := untilBeating(ctx, beat, stop); err != nil {
		return fmt.Errorf("the rollout never reached canary done, prod active at 2/5: %w", err)
	}
	if _, err := fleetctl(append(admin, "quarantine", "add", "1.0.9", "--reason", "leaks file descriptors")...); err != nil {
		return err
	}
	// One more pass so the status and stats the controller writes last are
	// the ones on disk; then stop it as systemd would.
	if err := untilBeating(ctx, beat, func() bool {
		st, err := fleet.ReadState(ctx)
		return err == nil && len(st.Quarantine.Value.Versions) == 1
	}); err != nil {
		return err
	}
	for range 3 {
		if err := beat(); err != nil {
			return err
		}
		time.Sleep(time.Second)
	}
	st, err := fleet.ReadState(ctx)
	if err != nil {
		return err
	}
	fx := Fixture{Commit: "298d45f", ControlID: controllerID, Made: time.Now().UTC(), Start: "1.0.0", Target: "1.1.0",
		Quarantine: "1.0.9", SpecRev: st.Spec.Revision, ConfigRev: st.Config.Revision, Groups: map[string]FixtureGroup{}}
	for g, e := range st.Groups {
		fx.Groups[g] = FixtureGroup{State: string(e.Value.State), Revision: e.Revision}
	}
	for _, a := range agents {
		a.Version = a.hb.ActiveVersion
		fx.Agents = append(fx.Agents, a.FixtureAgent)
	}
	for _, a := range agents {
		a.nc.Close()
	}
	nc.Close()
	if err := ctl.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := ctl.Wait(); err != nil {
		return fmt.Errorf("controller exit: %w", err)
	}
	// After the stop: nothing may have moved between the read above and it.
	b, err := json.MarshalIndent(fx, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "fixture.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := tarGz(filepath.Join(out, "store.tar.gz"), storeDir); err != nil {
		return err
	}
	if err := tarGz(filepath.Join(out, "auth.tar.gz"), authDir); err != nil {
		return err
	}
	fmt.Printf("fixture in %s: groups %v, spec rev %d\n", out, fx.Groups, fx.SpecRev)
	return nil
}

// statsSay is whether the stats the controller wrote count n agents of
// group g on 1.1.0.
func statsSay(ctx context.Context, fleet *kv.Fleet, g string, n int) bool {
	stats, err := fleet.ReadStats(ctx)
	if err != nil {
		return false
	}
	for _, s := range stats {
		if s.Group == g && s.Versions["1.1.0"].Count == n {
			return true
		}
	}
	return false
}

func until(ctx context.Context, ok func() bool) error {
	for !ok() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// untilBeating heartbeats every 500 ms until ok.
func untilBeating(ctx context.Context, beat func() error, ok func() bool) error {
	for {
		if err := beat(); err != nil {
			return err
		}
		if ok() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tarGz packs dir's files (paths relative to dir) into file.
func tarGz(file, dir string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr.Name = filepath.ToSlash(rel)
		hdr.ModTime, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = time.Unix(0, 0), 0, 0, "", ""
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return errors.Join(f.Close())
}
