package fleetctl

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestEdgeAdd: "edge add" against an operator-mode hub creates the site's
// consumer on the plan stream (delivering to fleet.edge.<site>, acked by
// flow control), mints the site's leaf user in EDGE with that site's
// grants, and records the mint (actor, reason, site, keys; no secret).
// Again, it keeps the consumer and adds a key. A site name that is not one
// subject token is a usage error; a hub that does not answer gets nothing
// minted.
func TestEdgeAdd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	srv, connect := operatorServer(t, ctx, dir)
	stdout, stderr, code := execute(t, "--nats", srv.URL(), "--reason", "new site", "edge", "add", "--dir", dir, "--site", "berlin", "-o", "json")
	if code != 0 {
		t.Fatalf("edge add: exit %d: %s", code, stderr)
	}
	var res struct {
		WriteResult
		Value EdgeAddReport `json:"value"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	want := EdgeAddReport{Site: "berlin", User: "edge-berlin", UserKey: res.Value.UserKey, Creds: filepath.Join(dir, "creds", "edge-berlin.creds"),
		Stream: kv.PlanStream, Consumer: "edge_berlin", DeliverSubject: "fleet.edge.berlin"}
	if diff := cmp.Diff(want, res.Value); diff != "" || !res.Written || !strings.HasPrefix(res.Value.UserKey, "U") {
		t.Errorf("edge add -o json (-want +got):\n%s%+v", diff, res.WriteResult)
	}
	creds, err := os.ReadFile(res.Value.Creds)
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(auth.EdgePermissions("berlin"), uc.Permissions); diff != "" {
		t.Errorf("the site's grants (-want +got):\n%s", diff)
	}

	admin, err := connect(filepath.Join(dir, auth.CredsFile(auth.UserAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	c, err := js.PushConsumer(ctx, kv.PlanStream, "edge_berlin")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.CachedInfo().Config; cfg.DeliverSubject != "fleet.edge.berlin" || cfg.AckPolicy != jetstream.AckFlowControlPolicy {
		t.Errorf("site consumer: %+v", cfg)
	}

	// Recorded: the site, its user in EDGE, its key.
	rep := historyOf(t, fleetctlBin(t), []string{"NATS_URL=" + srv.URL(), "NATS_CREDS=" + filepath.Join(dir, auth.CredsFile(auth.UserAdmin))})
	var recs []string
	for _, r := range rep.Records {
		if r.Audit == nil || r.Audit.Command != "edge add" {
			continue
		}
		recs = append(recs, r.Audit.Actor+" "+r.Audit.Reason+" "+r.Audit.Key)
		after := auditValue(t, r.Audit.After)
		wantAfter := &authAuditValue{Account: auth.AccountEdge, Name: "edge-berlin", Role: auth.RoleLeaf, Site: "berlin", Keys: []string{res.Value.UserKey}}
		if diff := cmp.Diff(wantAfter, after); diff != "" {
			t.Errorf("edge add's record after (-want +got):\n%s", diff)
		}
		if strings.Contains(string(r.Audit.After), "eyJ") || seedPattern.Match(r.Audit.After) {
			t.Errorf("edge add's record holds a secret: %s", r.Audit.After)
		}
	}
	if want := []string{"admin new site " + filepath.Join("users", "edge-berlin.json")}; !cmp.Equal(want, recs) {
		t.Errorf("edge add records (-want +got):\n%s", cmp.Diff(want, recs))
	}

	// Again: the consumer kept, a key added.
	if _, stderr, code := execute(t, "--nats", srv.URL(), "edge", "add", "--dir", dir, "--site", "berlin"); code != 0 {
		t.Fatalf("edge add again: exit %d: %s", code, stderr)
	}
	rec, err := auth.Dir{Path: dir}.User("edge-berlin")
	if err != nil || len(rec.Keys) != 2 || rec.Site != "berlin" {
		t.Errorf("edge-berlin after a second edge add: %+v, %v", rec, err)
	}

	// A hub that does not answer: nothing minted.
	before, err := os.ReadFile(filepath.Join(dir, "users", "edge-berlin.json"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	if _, _, code := execute(t, "--nats", srv.URL(), "--timeout", "2s", "edge", "add", "--dir", dir, "--site", "paris"); code == 0 {
		t.Error("edge add without a hub succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "users", "edge-paris.json")); err == nil {
		t.Error("edge add without a hub minted paris's user")
	}
	after, _ := os.ReadFile(filepath.Join(dir, "users", "edge-berlin.json"))
	if string(before) != string(after) {
		t.Error("edge add without a hub changed another site's record")
	}
}
