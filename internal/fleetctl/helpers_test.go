package fleetctl

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// testNow is the fixed clock of the operator command tests.
var testNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// env is a real embedded server with the stream and buckets, and a way to
// run commands against it with buffers.
type env struct {
	t     *testing.T
	ctx   context.Context
	srv   *natstest.Server
	fleet *kv.Fleet
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	srv := natstest.Start(t)
	f, err := kv.Ensure(ctx, srv.JetStream("test"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, srv: srv, fleet: f}
}

// global returns options for one command, with fresh output buffers.
func (e *env) global() (*Global, *natstest.Buffer, *natstest.Buffer) {
	out, errOut := &natstest.Buffer{}, &natstest.Buffer{}
	return &Global{
		NATSURL: e.srv.URL(), Timeout: 10 * time.Second,
		Out: out, ErrOut: errOut, Now: func() time.Time { return testNow },
	}, out, errOut
}

// run runs one command with fresh buffers and returns its stdout.
func (e *env) run(cmd func(g *Global) error) (string, error) {
	e.t.Helper()
	g, out, errOut := e.global()
	err := cmd(g)
	if s := errOut.String(); s != "" {
		e.t.Logf("stderr: %s", s)
	}
	return out.String(), err
}

// mustRun runs a command that must succeed.
func (e *env) mustRun(cmd func(g *Global) error) string {
	e.t.Helper()
	out, err := e.run(cmd)
	if err != nil {
		e.t.Fatalf("%v\nstdout: %s", err, out)
	}
	return out
}

func (e *env) config() kv.Entry[rollout.Config] {
	e.t.Helper()
	c, err := kv.Get[rollout.Config](e.ctx, e.fleet.Config, kv.KeyConfig)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// configRevision is the stored config's revision, 0 when there is none.
func (e *env) configRevision() uint64 {
	e.t.Helper()
	c, err := kv.Get[rollout.Config](e.ctx, e.fleet.Config, kv.KeyConfig)
	if errors.Is(err, kv.ErrNotFound) {
		return 0
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return c.Revision
}

func (e *env) putConfig(c rollout.Config) {
	e.t.Helper()
	if err := c.Validate(); err != nil {
		e.t.Fatalf("test config: %v", err)
	}
	e.put(e.fleet.Config, kv.KeyConfig, c)
}

func (e *env) spec() kv.Entry[rollout.Spec] {
	e.t.Helper()
	s, err := kv.Get[rollout.Spec](e.ctx, e.fleet.Plan, kv.KeySpec)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) putSpec(s rollout.Spec) {
	e.t.Helper()
	e.put(e.fleet.Plan, kv.KeySpec, s)
}

func (e *env) status(group string) kv.Entry[rollout.GroupStatus] {
	e.t.Helper()
	s, err := kv.Get[rollout.GroupStatus](e.ctx, e.fleet.Plan, kv.GroupKey(group))
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) putStatus(s rollout.GroupStatus) {
	e.t.Helper()
	e.put(e.fleet.Plan, kv.GroupKey(s.Group), s)
}

func (e *env) putStats(s kv.Stats) {
	e.t.Helper()
	e.put(e.fleet.Stats, kv.StatsKey(s.Group, s.ControllerID), s)
}

// put writes v at key whatever is there (a test's "someone else").
func (e *env) put(b interface {
	Put(context.Context, string, []byte) (uint64, error)
}, key string, v any) {
	e.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := b.Put(e.ctx, key, data); err != nil {
		e.t.Fatal(err)
	}
}

// checkGolden compares got with testdata/name, rewriting it with -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}

// checkWidth fails for any line wider than 100 columns.
func checkWidth(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("line %d columns wide (max 100): %q", n, line)
		}
	}
}

// mustContain fails unless err's message contains every part.
func mustContain(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// testCtx is the context commands run with; each bounds its own work with
// Global.Timeout.
func testCtx() context.Context { return context.Background() }
