package deploy_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/attacktest"
	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestHostileLeafSpoke: the second wall is the hub's, not the site's. A
// rogue that speaks the leaf protocol itself, with site paris's creds, and
// so skips the filtering a real nats-server does on its own side, asks the
// hub for everything (LS+ >) and gets nothing of another site's traffic;
// a subscription to berlin's plan deliveries, a reset of berlin's
// consumer, a stream create and a spec put each end the leaf connection
// with a permissions violation, and nothing of it reaches FLEET.
func TestHostileLeafSpoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a hub and an edge site's leaf node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir, ad, hub := startHub(t)
	ctl := runController(t, ctx, ad, hub.url(), 1)
	defer func() { _ = ctl.halt() }()
	fleet := waitFleet(t, ctx, ad, hub)
	observer := attacktest.Record(t, connect(t, ad, hub.url(), auth.CredsFile(auth.UserAdmin)))
	berlin := addEdgeSite(t, ctx, dir, ad, hub, "berlin")
	parisCreds := edgeAdd(t, ctx, ad, hub, "paris")

	// Berlin's agent heartbeats all along; the plan changes now and then.
	agent := rollout.AgentID("0b000000-0000-4000-8000-0000000000b2")
	_, creds, err := ad.IssueAgent(agent, "blue", "")
	if err != nil {
		t.Fatal(err)
	}
	ajs := jsFor(t, connect(t, ad, berlin.url(), creds, nats.CustomInboxPrefix(kv.AgentInboxPrefix(string(agent)))))
	hb, err := heartbeat.Encode(&heartbeat.Heartbeat{V: heartbeat.SchemaVersion, AgentID: agent, Group: "blue",
		ActiveVersion: "1.0.0", UpdaterVersion: "0.1.0", At: time.Now().UTC(), Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	var bg sync.WaitGroup
	defer bg.Wait()
	bgCtx, stop := context.WithCancel(ctx)
	defer stop()
	bg.Go(func() {
		for bgCtx.Err() == nil {
			_, _ = ajs.Publish(bgCtx, heartbeat.SubjectFor("blue", agent), hb)
			select {
			case <-bgCtx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	var writes sync.WaitGroup
	writesCtx, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	var lastSeq uint64 // the spec's last revision written
	writes.Go(func() {
		for writesCtx.Err() == nil {
			spec.Critical = !spec.Critical
			if rev, err := fleet.Plan.Put(writesCtx, kv.KeySpec, mustJSON(t, spec)); err == nil {
				lastSeq = rev
			}
			select {
			case <-writesCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})

	// Everything, asked for at the hub: only what paris may receive comes.
	spoke := dialLeaf(t, hub, parisCreds)
	spoke.send("LS+ >\r\nPING\r\n")
	natstest.Eventually(t, 20*time.Second, func() error {
		if observer.Count(heartbeat.SubjectFor("blue", agent)) < 10 || lastDelivered(observer.Since(0), kv.EdgeConsumer("berlin")) < 5 {
			return fmt.Errorf("berlin's heartbeats and plan deliveries not flowing yet")
		}
		return nil
	})
	for _, m := range spoke.received() {
		switch {
		case strings.HasPrefix(m.subject, "_R_.") || strings.HasPrefix(m.subject, "$JSC.R."):
		case m.subject == kv.EdgeDeliverSubject("paris") || strings.HasPrefix(m.reply, "$JS.ACK."+kv.PlanStream+"."+kv.EdgeConsumer("paris")+"."):
		default:
			t.Errorf("hostile spoke received %s (reply %q): %.120s", m.subject, m.reply, m.data)
		}
	}
	if spoke.closed() {
		t.Fatalf("the hub closed the connection on LS+ >: %v", spoke.errors())
	}

	// From here the plan stands still: a delivery of berlin's consumer at
	// or below what it had delivered is a replay.
	stopWrites()
	writes.Wait()
	natstest.Eventually(t, 10*time.Second, func() error {
		if got := lastDelivered(observer.Since(0), kv.EdgeConsumer("berlin")); got < lastSeq {
			return fmt.Errorf("berlin's consumer delivered up to %d, the spec is at %d", got, lastSeq)
		}
		return nil
	})
	berlinSeq := lastDelivered(observer.Since(0), kv.EdgeConsumer("berlin"))
	from := observer.Len()
	forbidden := []struct{ what, proto string }{
		{"subscribe to berlin's deliveries", "LS+ " + kv.EdgeDeliverSubject("berlin") + "\r\n"},
		{"reset berlin's consumer", lmsg(kv.EdgeResetSubject("hub", "berlin"), "_INBOX.hostile", `{"seq":1}`)},
		{"create a stream", lmsg("$JS.hub.API.STREAM.CREATE.EVIL", "_INBOX.hostile", `{"name":"EVIL","subjects":["evil.>"]}`)},
		{"put the spec", lmsg("$JS.hub.API.$KV.fleet_plan.spec", "_INBOX.hostile", `{"v":1,"target_version":"6.6.6","note":"`+rogueMark+`"}`)},
		{"put the config", lmsg(kv.KeySubject(kv.BucketConfig, kv.KeyConfig), "", `{"v":1,"note":"`+rogueMark+`"}`)},
	}
	for i, f := range forbidden {
		if i > 0 {
			spoke = dialLeaf(t, hub, parisCreds)
		}
		spoke.send(f.proto + "PING\r\n")
		natstest.Eventually(t, 10*time.Second, func() error {
			if !spoke.closed() {
				return fmt.Errorf("%s: the hub still holds the connection", f.what)
			}
			return nil
		})
		if errs := strings.Join(spoke.errors(), "; "); !strings.Contains(errs, "Permissions Violation") {
			t.Errorf("%s: the hub closed the connection with %q, want a permissions violation", f.what, errs)
		}
	}
	natstest.Consistently(t, 2*time.Second, func() error {
		if err := rogueInFleet(observer, from); err != nil {
			return err
		}
		for _, m := range observer.Since(from) {
			if seq, ok := deliveredSeq(m, kv.EdgeConsumer("berlin")); ok && seq <= berlinSeq {
				return fmt.Errorf("berlin's consumer delivered stream sequence %d again (had delivered up to %d): it was reset", seq, berlinSeq)
			}
		}
		return nil
	})
	if _, err := fleet.JS.Stream(ctx, "EVIL"); err == nil {
		t.Error("stream EVIL exists")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func lmsg(subject, reply, data string) string {
	if reply != "" {
		reply += " "
	}
	return fmt.Sprintf("LMSG %s %s%d\r\n%s\r\n", subject, reply, len(data), data)
}

// rawLeaf is a leaf connection spoken by hand: the hub's side of the
// protocol sees a solicited leaf node, authenticated with a user's creds,
// that filters nothing on its own side.
type rawLeaf struct {
	t    *testing.T
	conn net.Conn
	mu   sync.Mutex
	msgs []rawMsg
	errs []string
	done chan struct{}
}

type rawMsg struct{ subject, reply, data string }

// dialLeaf opens a leaf connection to the hub with creds (CONNECT with the
// user JWT and the nonce signed by its seed, no headers) and reads what
// the hub sends until it closes the connection.
func dialLeaf(t *testing.T, hub *node, creds string) *rawLeaf {
	t.Helper()
	raw, err := os.ReadFile(creds)
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.ParseDecoratedJWT(raw)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hub.opts.LeafNode.Port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("leaf port said %q, %v", line, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	var info struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(line), "INFO ")), &info); err != nil {
		t.Fatal(err)
	}
	sig, err := kp.Sign([]byte(info.Nonce))
	if err != nil {
		t.Fatal(err)
	}
	connect, _ := json.Marshal(map[string]any{"jwt": token, "sig": base64.RawURLEncoding.EncodeToString(sig),
		"name": "hostile-spoke", "version": "2.15.2", "headers": false})
	l := &rawLeaf{t: t, conn: conn, done: make(chan struct{})}
	go l.read(r)
	l.send("CONNECT " + string(connect) + "\r\nPING\r\n")
	natstest.Eventually(t, 10*time.Second, func() error {
		if l.closed() {
			return fmt.Errorf("the hub refused the leaf connection: %v", l.errors())
		}
		if hub.ns.NumLeafNodes() < 2 {
			return fmt.Errorf("hostile spoke not attached yet")
		}
		return nil
	})
	return l
}

func (l *rawLeaf) send(proto string) {
	l.t.Helper()
	if _, err := l.conn.Write([]byte(proto)); err != nil && !l.closed() {
		l.t.Fatal(err)
	}
}

func (l *rawLeaf) read(r *bufio.Reader) {
	defer close(l.done)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		op, args, _ := strings.Cut(line, " ")
		switch op {
		case "PING":
			_, _ = l.conn.Write([]byte("PONG\r\n"))
		case "-ERR":
			l.mu.Lock()
			l.errs = append(l.errs, args)
			l.mu.Unlock()
		case "LMSG":
			tok := strings.Fields(args)
			size, err := strconv.Atoi(tok[len(tok)-1])
			if err != nil || len(tok) < 2 {
				return
			}
			m := rawMsg{subject: tok[0]}
			switch {
			case len(tok) == 3:
				m.reply = tok[1]
			case len(tok) > 3 && tok[1] == "+":
				m.reply = tok[2]
			}
			data := make([]byte, size+2)
			if _, err := io.ReadFull(r, data); err != nil {
				return
			}
			m.data = string(data[:size])
			l.mu.Lock()
			l.msgs = append(l.msgs, m)
			l.mu.Unlock()
		}
	}
}

func (l *rawLeaf) closed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

func (l *rawLeaf) received() []rawMsg {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]rawMsg(nil), l.msgs...)
}

func (l *rawLeaf) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errs...)
}
