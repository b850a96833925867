package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/releases"
)

// hookReceiver is a webhook receiver on a fixed address that can go down
// for real (its listener closed: connection refused) and come back on the
// same address. It verifies every POST's signature and keeps the POSTs it
// answered 2xx, duplicates included.
type hookReceiver struct {
	t      *testing.T
	secret []byte
	addr   string

	mu   sync.Mutex
	srv  *http.Server
	got  []controller.WebhookPayload
	done chan struct{}
}

func startHookReceiver(t *testing.T, secret []byte) *hookReceiver {
	t.Helper()
	r := &hookReceiver{t: t, secret: secret, addr: fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))}
	r.up()
	t.Cleanup(r.down)
	return r
}

func (r *hookReceiver) url() string { return "http://" + r.addr + "/hooks/fleetwave" }

func (r *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	if !controller.VerifyWebhookSignature(r.secret, body, req.Header.Get(controller.HeaderWebhookSignature)) {
		r.t.Errorf("webhook POST with a bad signature: %s", body)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var p controller.WebhookPayload
	if err := json.Unmarshal(body, &p); err != nil || p.ID != req.Header.Get(controller.HeaderWebhookEventID) {
		r.t.Errorf("webhook POST %s: %v", body, err)
	}
	r.mu.Lock()
	r.got = append(r.got, p)
	r.mu.Unlock()
}

func (r *hookReceiver) up() {
	r.t.Helper()
	var ln net.Listener
	natstest.Eventually(r.t, 10*time.Second, func() (err error) {
		ln, err = net.Listen("tcp", r.addr)
		return err
	})
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			r.t.Errorf("receiver: %v", err)
		}
	}()
	r.mu.Lock()
	r.srv, r.done = srv, done
	r.mu.Unlock()
}

// down closes the listener and every connection: POSTs are refused.
func (r *hookReceiver) down() {
	r.mu.Lock()
	srv, done := r.srv, r.done
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		srv.Close()
		<-done
	}
}

func (r *hookReceiver) posts() []controller.WebhookPayload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// uniqueSeqs is what a receiver that dedupes by id keeps: the stream
// sequence of each id's first POST, in the order received.
func uniqueSeqs(posts []controller.WebhookPayload) []uint64 {
	seen := map[string]bool{}
	var out []uint64
	for _, p := range posts {
		if !seen[p.ID] {
			seen[p.ID] = true
			out = append(out, p.Sequence)
		}
	}
	return out
}

// TestWebhooksEndToEnd runs two controller processes (minted creds, a
// NATS server in operator mode) with one webhook, and agentd processes. A
// rollout starts; once the receiver has some of its events the leading
// controller is killed with SIGKILL and the receiver goes down (its port
// closed) for 30 s. The other controller takes the lead and the rollout
// runs to done while the receiver is down. Once it is back, the receiver
// has every transition, halt, alert and quarantine event FLEET_AUDIT holds,
// in stream order, each exactly once after dedupe by id, every POST signed.
func TestWebhooksEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("the receiver is down for 30 s")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := t.TempDir()
	authDir := filepath.Join(dir, "auth")
	runCmd(t, "fleetctl", "auth", "init", "--dir", authDir)
	srv := natstest.StartConfig(t, filepath.Join(authDir, "resolver.conf"))

	rel := releases.NewServer(nil)
	for _, v := range []string{"1.0.0", "1.1.0"} {
		if err := rel.Add(v, releases.Good); err != nil {
			t.Fatal(err)
		}
	}
	relSrv := httptest.NewServer(rel)
	t.Cleanup(relSrv.Close)

	secret := []byte("e2e-webhook-secret")
	secretFile := filepath.Join(dir, "webhook.secret")
	if err := os.WriteFile(secretFile, append(secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	rcv := startHookReceiver(t, secret)

	ctrls := map[string]*controllerProc{}
	var findURL string
	for _, id := range []string{"ctl-a", "ctl-b"} {
		httpAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
		if findURL == "" {
			findURL = "http://" + httpAddr + "/v1/find"
		}
		ctrls[id] = &controllerProc{httpAddr: httpAddr, cmd: start(t, filepath.Join(dir, id+".log"), "controller", "run",
			"--nats", srv.URL(), "--creds", filepath.Join(authDir, "creds", "controller.creds"), "--id", id,
			"--http-addr", httpAddr, "--heartbeat-interval", "1s", "--stats-interval", "1s",
			"--reconcile-interval", "500ms", "--lease-ttl", "3s",
			"--webhook", rcv.url(), "--webhook-secret-file", secretFile,
			// The test writes the spec and the config without fleetctl's audit
			// records; an unattributed-change event (a default webhook kind)
			// arriving after want is read would be one POST too many.
			"--attribution-grace", "1h")}
	}
	f := &fleet{t: t, ctx: ctx, natsURL: srv.URL(), findURL: findURL, rel: rel, authDir: authDir, dir: dir, relURL: relSrv.URL}
	nc := f.connectAdmin()

	// The leader places the webhook's cursor: what is stored from then on
	// is the webhook's.
	key := kv.WebhookCursorKey(rcv.url())
	var start kv.WebhookCursor
	natstest.Eventually(t, 30*time.Second, func() (err error) {
		start, _, err = kv.ReadWebhookCursor(ctx, nc, key)
		return err
	})

	cfg := rollout.DefaultConfig()
	canary, prod := groupConfig("canary", 1, 50), groupConfig("prod", 1, 50)
	prod.DependsOn = []string{"canary"}
	cfg.Groups = []rollout.GroupConfig{canary, prod}
	f.setConfig(cfg)
	f.setSpec(func(s *rollout.Spec) { s.StartVersion, s.TargetVersion = "1.0.0", "1.0.0" })
	f.groups = []string{"canary", "prod"}
	natstest.Eventually(t, 30*time.Second, func() error {
		st := f.statuses()
		for _, g := range f.groups {
			if _, ok := st[g]; !ok {
				return fmt.Errorf("no status for group %s yet", g)
			}
		}
		return nil
	})
	for g, n := range map[string]int{"canary": 2, "prod": 3} {
		for range n {
			f.agents = append(f.agents, f.startAgent(g, false))
		}
	}
	f.waitDone("1.0.0", 2*time.Minute)

	// The rollout; the leader dies once the receiver has some of its events.
	before := len(uniqueSeqs(rcv.posts()))
	f.setSpec(func(s *rollout.Spec) { s.TargetVersion = "1.1.0" })
	natstest.Eventually(t, time.Minute, func() error {
		if n := len(uniqueSeqs(rcv.posts())); n < before+3 {
			return fmt.Errorf("receiver has %d events of the rollout, want 3", n-before)
		}
		return nil
	})
	lease, err := kv.Get[kv.LeaseValue](ctx, f.kv.Stats, kv.KeyLeader)
	if err != nil {
		t.Fatal(err)
	}
	leader := ctrls[lease.Value.Holder]
	if leader == nil {
		t.Fatalf("lease held by %q", lease.Value.Holder)
	}
	if err := leader.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	rcv.down()
	downAt := time.Now()
	received := len(rcv.posts())
	t.Logf("killed leader %s and took the receiver down, %d POSTs received so far", lease.Value.Holder, len(rcv.posts()))

	// The rollout finishes with the receiver down: it never waits on it.
	f.waitDone("1.1.0", 2*time.Minute)
	if n := len(rcv.posts()); n != received {
		t.Fatalf("the receiver is down and got %d POSTs", n-received)
	}
	t.Logf("rollout done %v after the receiver went down", time.Since(downAt).Round(time.Millisecond))
	// The outage lasts at least 30 s whatever the rollout does (a duration
	// the test imposes, not an outcome it waits for).
	<-time.After(time.Until(downAt.Add(30 * time.Second)))
	rcv.up()
	t.Logf("receiver back after %v", time.Since(downAt).Round(time.Millisecond))

	tl, err := f.kv.ReadTimelineAfter(ctx, start.Timeline(), math.MaxInt)
	if err != nil || len(tl.Problems) > 0 {
		t.Fatalf("timeline: %v %v", err, tl.Problems)
	}
	entries := tl.Entries
	var want []uint64
	for _, e := range entries {
		if e.Event != nil && slices.Contains(controller.DefaultWebhookKinds, e.Event.Kind) {
			want = append(want, e.Seq)
		}
	}
	natstest.Eventually(t, 90*time.Second, func() error {
		if diff := cmp.Diff(want, uniqueSeqs(rcv.posts())); diff != "" {
			return fmt.Errorf("events received after dedupe, by stream sequence (-want +got):\n%s", diff)
		}
		return nil
	})
	posts := rcv.posts()
	t.Logf("%d events, %d POSTs (%d duplicates), %d of them after the outage", len(want), len(posts), len(posts)-len(want), len(posts)-received)
	for _, p := range posts {
		if p.Event == nil || p.Event.Group != p.Group {
			t.Errorf("payload %+v", p)
		}
	}
}

// controllerProc is one controller process.
type controllerProc struct {
	httpAddr string
	cmd      *exec.Cmd
}
