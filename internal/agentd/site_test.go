package agentd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// startDomainServer runs a JetStream server whose JetStream domain is
// domain, as an edge site's leaf node has (deploy/nats/leaf-edge.conf).
func startDomainServer(t *testing.T, domain string) *natstest.Server {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "domain.conf")
	if err := os.WriteFile(conf, []byte("jetstream {\n  domain: "+domain+"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return natstest.StartConfig(t, conf)
}

// TestAgentSiteFromJetStreamDomain (issue 15 point 8): an agent connected
// to a server with a JetStream domain names that domain as its site; one
// given --site names that, saved in update.yaml; 'agentd status' says
// which and where it comes from; a bad --site is refused and changes
// nothing.
func TestAgentSiteFromJetStreamDomain(t *testing.T) {
	bin := buildAgentd(t)
	srv := startDomainServer(t, "edge-berlin")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	setPlan(t, ctx, fleet, "1.0.0", "1.0.0")

	run := func(site string) (root string, id string) {
		t.Helper()
		root = t.TempDir()
		a, err := agentd.New(agentd.Options{Root: root, Group: "blue", Site: site, NATSURL: srv.URL(), Interval: 50 * time.Millisecond,
			Log: natstest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		actx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(actx) }()
		t.Cleanup(func() { stop(); <-done })
		return root, string(a.ID())
	}
	beatOf := func(id string) (*heartbeat.Heartbeat, error) {
		msgs, err := fleet.LastHeartbeats(ctx, "blue")
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if strings.HasSuffix(m.Subject, id) {
				return heartbeat.DecodeFrom(m.Subject, m.Data)
			}
		}
		return nil, fmt.Errorf("no heartbeat of %s yet", id)
	}
	waitSite := func(id, want string) {
		t.Helper()
		natstest.Eventually(t, 10*time.Second, func() error {
			hb, err := beatOf(id)
			if err == nil && hb.Site != want {
				err = fmt.Errorf("heartbeat of %s names site %q, want %q", id, hb.Site, want)
			}
			return err
		})
	}

	domainRoot, domainID := run("")
	givenRoot, givenID := run("rack-7")
	waitSite(domainID, "edge-berlin")
	waitSite(givenID, "rack-7")
	if uf, err := install.LoadUpdateFile(givenRoot); err != nil || uf.Spec.Site != "rack-7" {
		t.Errorf("--site not saved in update.yaml: spec.site %q, %v", uf.Spec.Site, err)
	}
	if uf, err := install.LoadUpdateFile(domainRoot); err != nil || uf.Spec.Site != "" {
		t.Errorf("the domain was saved in update.yaml: spec.site %q, %v (it follows the server)", uf.Spec.Site, err)
	}

	status := func(root string) agentd.StatusReport {
		t.Helper()
		stdout, stderr, code := execAgentd(t, bin, "status", "--root", root, "--nats", srv.URL())
		if code != 0 {
			t.Fatalf("agentd status: exit %d:\n%s", code, stderr)
		}
		var rep agentd.StatusReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("agentd status is not JSON: %v\n%s", err, stdout)
		}
		return rep
	}
	if rep := status(domainRoot); rep.Site != "edge-berlin" || rep.SiteFrom != "jetstream domain" {
		t.Errorf("agentd status: site %q from %q, want edge-berlin from the jetstream domain", rep.Site, rep.SiteFrom)
	}
	if rep := status(givenRoot); rep.Site != "rack-7" || rep.SiteFrom != "update.yaml" {
		t.Errorf("agentd status: site %q from %q, want rack-7 from update.yaml", rep.Site, rep.SiteFrom)
	}

	// A bad --site is a usage error that writes nothing.
	before := snapshot(t, givenRoot)
	for _, bad := range []string{"edge berlin", "edge>", strings.Repeat("s", 41), "(none)"} {
		_, stderr, code := execAgentd(t, bin, "disable", "--root", givenRoot, "--site", bad)
		if code != 2 || !strings.Contains(stderr, "--site") || !strings.Contains(stderr, "invalid site name") {
			t.Errorf("agentd disable --site %q: exit %d, want 2 naming --site:\n%s", bad, code, stderr)
		}
	}
	if after := snapshot(t, givenRoot); after != before {
		t.Errorf("a refused --site changed the root:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestAgentNoSiteWithoutDomain: a server without a JetStream domain, and
// no --site: the heartbeat names no site (and leaves the field out).
func TestAgentNoSiteWithoutDomain(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agentd.New(agentd.Options{Root: t.TempDir(), Group: "blue", NATSURL: srv.URL(), Interval: 50 * time.Millisecond, Log: natstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	defer func() { stop(); <-done }()
	natstest.Eventually(t, 10*time.Second, func() error {
		msgs, err := fleet.LastHeartbeats(ctx, "blue")
		if err != nil || len(msgs) == 0 {
			return fmt.Errorf("no heartbeat yet (%v)", err)
		}
		if strings.Contains(string(msgs[0].Data), `"site"`) {
			return fmt.Errorf("heartbeat names a site: %s", msgs[0].Data)
		}
		return nil
	})
}
