package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// write is one write of the probe loop: the key's value is its index.
type write struct {
	key   string
	value string
	rev   uint64
	acked bool // false: the ack was lost, and a re-read found the write
}

// prober writes probe.<i> keys to the plan bucket one after another with
// compare-and-swap creates, through any failover: a write whose ack does not
// arrive is re-read, and retried only when it did not land.
type prober struct {
	b jetstream.KeyValue

	mu     sync.Mutex
	writes []write
	errs   int // failed attempts (timeouts, no leader, ...)
}

func (p *prober) acked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, w := range p.writes {
		if w.acked {
			n++
		}
	}
	return n
}

func (p *prober) run(ctx context.Context) error {
	for i := 0; ctx.Err() == nil; {
		key, value := "probe."+strconv.Itoa(i), strconv.Itoa(i)
		rev, err := within(ctx, 2*time.Second, func(ctx context.Context) (uint64, error) {
			return p.b.Create(ctx, key, []byte(value))
		})
		if err == nil {
			p.record(write{key: key, value: value, rev: rev, acked: true})
			i++
			continue
		}
		p.mu.Lock()
		p.errs++
		p.mu.Unlock()
		// Unacknowledged: did it land anyway?
		e, gerr := within(ctx, 2*time.Second, func(ctx context.Context) (jetstream.KeyValueEntry, error) {
			return p.b.Get(ctx, key)
		})
		switch {
		case gerr == nil && string(e.Value()) == value:
			p.record(write{key: key, value: value, rev: e.Revision()})
			i++
		case gerr == nil:
			return fmt.Errorf("%s holds %q, written by nobody", key, e.Value())
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			// Not written: try again.
		default:
			// No answer yet (an election): re-read next round.
		}
	}
	return nil
}

func (p *prober) record(w write) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writes = append(p.writes, w)
}

// TestClusterFailoverLosesNoAcknowledgedWrite starts the three nodes of
// cluster-*.conf on loopback, creates the stream and buckets with three
// replicas, and writes to the plan bucket in a loop while the node leading
// the bucket is shut down: every acknowledged write is readable afterwards
// with its revision, and the controller keeps reconciling (it writes the
// group status for a target set after the failover).
func TestClusterFailoverLosesNoAcknowledgedWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ad, nodes := startCluster(t)
	all := urls(nodes...)

	// Once the cluster has a JetStream meta leader, the controller creates
	// the stream and buckets with three replicas and runs the rollout.
	admin := jsFor(t, connect(t, ad, all, auth.CredsFile(auth.UserAdmin)))
	natstest.Eventually(t, 30*time.Second, func() error {
		_, err := within(ctx, 2*time.Second, admin.AccountInfo)
		return err
	})
	ctl := runController(t, ctx, ad, all, 3)
	var fleet *kv.Fleet
	natstest.Eventually(t, 30*time.Second, func() (err error) {
		select {
		case err := <-ctl.done:
			t.Fatalf("controller stopped: %v\n%s", err, ctl.log.String())
		default:
		}
		fleet, err = within(ctx, 5*time.Second, func(ctx context.Context) (*kv.Fleet, error) { return kv.Open(ctx, admin) })
		return err
	})
	for _, name := range []string{kv.StreamHB, kv.PlanStream, "KV_" + kv.BucketConfig, "KV_" + kv.BucketStats} {
		st, err := admin.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("%s has %d replicas, want 3", name, r)
		}
	}
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("blue")}
	if _, err := kv.Save(ctx, fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	spec.Critical = true
	specRev, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitTarget := func(target string) {
		t.Helper()
		natstest.Eventually(t, 30*time.Second, func() error {
			st, err := within(ctx, 2*time.Second, func(ctx context.Context) (kv.Entry[rollout.GroupStatus], error) {
				return kv.Get[rollout.GroupStatus](ctx, fleet.Plan, kv.GroupKey("blue"))
			})
			if err != nil {
				return err
			}
			if st.Value.TargetVersion != target {
				return fmt.Errorf("group blue is about %q, want %q", st.Value.TargetVersion, target)
			}
			return nil
		})
	}
	waitTarget("1.1.0")

	// Write in a loop; kill the plan bucket's leader mid-loop.
	p := &prober{b: fleet.Plan}
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan error, 1)
	go func() { probeDone <- p.run(probeCtx) }()
	natstest.Eventually(t, 20*time.Second, func() error {
		if n := p.acked(); n < 100 {
			return fmt.Errorf("%d writes acknowledged", n)
		}
		return nil
	})
	st, err := admin.Stream(ctx, kv.PlanStream)
	if err != nil {
		t.Fatal(err)
	}
	leader := st.CachedInfo().Cluster.Leader
	var killed *node
	for _, n := range nodes {
		if n.opts.ServerName == leader {
			killed = n
		}
	}
	if killed == nil {
		t.Fatalf("plan bucket leader %q is none of the nodes", leader)
	}
	beforeKill := p.acked()
	killed.stop()
	t.Logf("stopped %s, the plan bucket's leader, after %d acknowledged writes", leader, beforeKill)
	natstest.Eventually(t, 40*time.Second, func() error {
		if n := p.acked(); n < beforeKill+100 {
			return fmt.Errorf("%d writes acknowledged after the failover, want 100", n-beforeKill)
		}
		return nil
	})
	stopProbe()
	if err := <-probeDone; err != nil {
		t.Fatal(err)
	}

	// Every write that was acknowledged (and every unacknowledged one that
	// landed) is there, at its revision, on the new leader.
	t.Logf("%d writes acknowledged after the failover", p.acked()-beforeKill)
	natstest.Eventually(t, 30*time.Second, func() (err error) {
		st, err = within(ctx, 2*time.Second, func(ctx context.Context) (jetstream.Stream, error) {
			return admin.Stream(ctx, kv.PlanStream)
		})
		return err
	})
	if nl := st.CachedInfo().Cluster.Leader; nl == leader || nl == "" {
		t.Errorf("plan bucket leader after the failover: %q", nl)
	}
	var last uint64
	for _, w := range p.writes {
		e, err := within(ctx, 5*time.Second, func(ctx context.Context) (jetstream.KeyValueEntry, error) {
			return fleet.Plan.Get(ctx, w.key)
		})
		if err != nil {
			t.Errorf("%s (revision %d, acked %v) lost: %v", w.key, w.rev, w.acked, err)
			continue
		}
		if string(e.Value()) != w.value || e.Revision() != w.rev {
			t.Errorf("%s: got %q at revision %d, wrote %q at %d", w.key, e.Value(), e.Revision(), w.value, w.rev)
		}
		if w.rev <= last {
			t.Errorf("%s: revision %d not after %d", w.key, w.rev, last)
		}
		last = w.rev
	}
	t.Logf("%d writes (%d acknowledged) checked; %d attempts failed during the failover", len(p.writes), p.acked(), p.errs)

	// The rollout continues on the two remaining nodes: a new target set
	// now reaches the group's status, written by the controller.
	spec.TargetVersion = "2.0.0"
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, specRev); err != nil {
		t.Fatal(err)
	}
	waitTarget("2.0.0")
	if err := ctl.halt(); err != nil {
		t.Errorf("controller: %v\n%s", err, ctl.log.String())
	}
}
