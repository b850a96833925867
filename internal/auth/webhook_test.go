package auth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestControllerWebhooksWithMintedCreds: the real controller
// (controller.Run with its minted credentials, a user of CONTROL, in
// operator mode) delivers a webhook with the grants it already has: it
// places and moves its cursor in fleet_stats, reads FLEET_AUDIT with
// batched direct gets, and POSTs a signed event; the server refuses it
// nothing. Webhooks need no consumer, so the CONTROL account still imports
// none (TestWebhookCursorDenials).
func TestControllerWebhooksWithMintedCreds(t *testing.T) {
	e := newFleetEnvBare(t) // the controller creates the bus
	secret := []byte("0123456789abcdef")
	secretFile := filepath.Join(t.TempDir(), "webhook.secret")
	if err := os.WriteFile(secretFile, append(secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []controller.WebhookPayload
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !controller.VerifyWebhookSignature(secret, body, r.Header.Get(controller.HeaderWebhookSignature)) {
			t.Errorf("bad signature on %s", body)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var p controller.WebhookPayload
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("payload %s: %v", body, err)
		}
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	}))
	t.Cleanup(rcv.Close)

	ctx, cancel := context.WithCancel(e.ctx)
	logs := &natstest.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(ctx, &controller.RunOptions{
			NATSURL: e.srv.URL(), Creds: filepath.Join(e.dir.Path, auth.CredsFile(auth.UserController)), ID: "c1",
			StatsInterval: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, AgentExpiry: time.Minute,
			ReconcileInterval: 100 * time.Millisecond, LeaseTTL: 2 * time.Second, Replicas: 1,
			Webhook: controller.WebhookFlags{URLs: []string{rcv.URL}, SecretFile: secretFile},
		}, slog.New(slog.NewTextHandler(logs, nil)))
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller log:\n%s", logs.String())
		}
	})
	key := kv.WebhookCursorKey(rcv.URL)
	var start kv.WebhookCursor
	natstest.Eventually(t, 20*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("controller stopped: %v", err)
		default:
		}
		var err error
		if e.fleet == nil {
			if e.fleet, err = kv.Open(e.ctx, e.js(auth.CredsFile(auth.UserAdmin))); err != nil {
				return err
			}
		}
		start, _, err = kv.ReadWebhookCursor(e.ctx, e.fleet.JS.Conn(), key)
		return err
	})
	ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, From: rollout.StateCanary, To: rollout.StateCanary,
		Reason: "2 of 5 canaries failed", At: time.Now().UTC()}
	if err := e.fleet.PublishEvent(ev); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 1 || got[0].Event == nil || got[0].Event.Reason != ev.Reason {
			return fmt.Errorf("received %+v", got)
		}
		return nil
	})
	natstest.Eventually(t, 20*time.Second, func() error {
		c, _, err := kv.ReadWebhookCursor(e.ctx, e.fleet.JS.Conn(), key)
		if err == nil && c.Timeline().Events <= start.Timeline().Events {
			err = fmt.Errorf("cursor at %+v, was %+v: not moved past the event in %s", c.Timeline(), start.Timeline(), kv.StreamEvents)
		}
		return err
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("controller: %v", err)
	}
	if l := strings.ToLower(logs.String()); strings.Contains(l, "violation") || strings.Contains(l, "cannot read") || strings.Contains(l, "cannot write") {
		t.Errorf("the controller was refused something:\n%s", logs.String())
	}
}

// TestWebhookCursorDenials: an agent may neither read nor write a
// webhook's cursor, nor create a consumer on FLEET_AUDIT; the controller
// may not create one either (a push consumer would deliver FLEET_AUDIT's
// messages, which the controller writes, onto any subject of FLEET: the
// reason webhooks keep a cursor instead), and none exists afterwards.
func TestWebhookCursorDenials(t *testing.T) {
	e := newFleetEnv(t)
	if _, _, err := e.dir.IssueAgent(agentA, "blue", ""); err != nil {
		t.Fatal(err)
	}
	key := kv.WebhookCursorKey("https://hooks.example.com/x")
	if _, err := kv.SaveWebhookCursor(e.ctx, e.fleet.JS, key, kv.WebhookCursor{V: 1, Webhook: "x", Seq: 1, At: time.Now().UTC(), By: "c1"}, 0); err != nil {
		t.Fatal(err)
	}
	cursorSubj := kv.KeySubject(kv.BucketStats, key)
	pushConsumer := `{"stream_name":"FLEET_AUDIT","config":{"durable_name":"hook","deliver_subject":"fleet.plan.spec","filter_subject":"fleet.events.evil","ack_policy":"none"}}`
	create := "$JS.API.CONSUMER.CREATE." + kv.StreamAudit + ".hook"
	cases := []denial{
		{"read a webhook's cursor", func(ctx context.Context, a *agentConn) error {
			_, _, err := kv.ReadWebhookCursor(ctx, a.nc, key)
			return err
		}, "$JS.API.DIRECT.GET." + kv.StreamOf(kv.BucketStats) + "." + cursorSubj, false},
		{"move a webhook's cursor", func(ctx context.Context, a *agentConn) error {
			if err := a.nc.Publish(cursorSubj, []byte(`{"v":1}`)); err != nil {
				return err
			}
			return a.nc.FlushWithContext(ctx)
		}, cursorSubj, true},
		{"create a consumer on the audit trail", func(ctx context.Context, a *agentConn) error {
			_, err := a.nc.RequestWithContext(ctx, create, []byte(pushConsumer))
			return err
		}, create, false},
	}
	for _, d := range cases {
		t.Run("agent: "+d.name, func(t *testing.T) { d.expect(t, e, e.agent(agentA, auth.AgentCredsFile(agentA))) })
	}
	t.Run("controller: create a push consumer on the audit trail", func(t *testing.T) {
		ctl := e.watched(auth.CredsFile(auth.UserController))
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
		defer cancel()
		m, err := ctl.nc.RequestWithContext(ctx, create, []byte(pushConsumer))
		if err == nil {
			var resp struct {
				Error *struct{ Description string } `json:"error"`
			}
			if json.Unmarshal(m.Data, &resp) != nil || resp.Error == nil {
				t.Errorf("the controller created a consumer: %s", m.Data)
			}
		}
		t.Logf("refused: %v", err)
	})
	// The cursor is as the admin wrote it, and FLEET_AUDIT has no consumer.
	c, rev, err := kv.ReadWebhookCursor(e.ctx, e.fleet.JS.Conn(), key)
	if err != nil || c.Seq != 1 || c.By != "c1" {
		t.Errorf("cursor after the attempts: %+v rev %d, %v", c, rev, err)
	}
	st, err := e.fleet.JS.Stream(e.ctx, kv.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Consumers; n != 0 {
		t.Errorf("%s has %d consumers", kv.StreamAudit, n)
	}
}
