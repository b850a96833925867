package controller_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestWebhookHostileReceivers: a receiver is a peer the controller does
// not trust. One that redirects to another host is not followed: the
// other host never gets the signed POST (0 requests), and the message is
// retried; one that answers a 1 GiB body (streamed) has at most a few MiB
// of it read before the connection is closed; one that answers 128 KiB of
// headers is a failed delivery, retried, never read whole.
func TestWebhookHostileReceivers(t *testing.T) {
	f := newFixture(t)
	var otherHits atomic.Int64
	other := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		t.Errorf("the other host got %s %s (signature %q)", r.Method, r.URL, r.Header.Get(controller.HeaderWebhookSignature))
	}))
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	other.Listener = ln
	other.Start()
	t.Cleanup(other.Close)

	var redirects, bodies, headers atomic.Int64
	var sent atomic.Int64 // the most bytes of a 1 GiB answer taken
	hostile := func(h http.HandlerFunc) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL + "/hook"
	}
	redirectURL := hostile(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		redirects.Add(1)
		http.Redirect(w, r, other.URL+"/hook", http.StatusTemporaryRedirect)
	})
	bodyURL := hostile(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		bodies.Add(1)
		chunk := []byte(strings.Repeat("x", 64<<10))
		n := int64(0)
		for n < 1<<30 {
			k, err := w.Write(chunk)
			n += int64(k)
			if err != nil {
				break
			}
		}
		if n > sent.Load() {
			sent.Store(n)
		}
	})
	headerURL := hostile(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		headers.Add(1)
		w.Header().Set("X-Junk", strings.Repeat("j", 128<<10))
		w.WriteHeader(http.StatusOK)
	})
	f.notify = testNotify(redirectURL, bodyURL, headerURL)
	rc := f.startController("c1")
	for _, u := range []string{redirectURL, bodyURL, headerURL} {
		f.waitCursor(u)
	}
	ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, From: rollout.StateCanary, To: rollout.StateCanary,
		Reason: "canary failed", At: f.clk.Now().UTC()}
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.JetStream("events").Publish(f.ctx, kv.EventSubject("prod"), data); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, waitLong, func() error {
		m := webhookSamples(t, rc.c.Registry())
		switch {
		case redirects.Load() < 2 || headers.Load() < 2:
			return fmt.Errorf("%d POSTs to the redirecting receiver, %d to the one with huge headers: want each retried", redirects.Load(), headers.Load())
		case bodies.Load() != 1 || m["ok"] != 1:
			return fmt.Errorf("%d POSTs to the receiver with a 1 GiB answer, %v ok: want it delivered once", bodies.Load(), m["ok"])
		case sent.Load() == 0:
			return fmt.Errorf("the 1 GiB answer is still being sent")
		}
		return nil
	})
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the other host got %d requests, want 0", n)
	}
	if n := sent.Load(); n > 64<<20 {
		t.Errorf("%d MiB of the 1 GiB answer were taken, want the controller to stop after about 1 MiB", n>>20)
	} else {
		t.Logf("%.1f MiB of the 1 GiB answer were sent before the controller hung up", float64(n)/(1<<20))
	}
}
