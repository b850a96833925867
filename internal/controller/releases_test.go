package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/common/model"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/promtest"
	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// releaseRepo is a real release repository (internal/tuftest) served over
// HTTP by a server the test can break (503 for every request).
type releaseRepo struct {
	*tuftest.Repo
	URL    string
	broken atomic.Bool
	// ticker paces every controller's reads of it.
	ticker *clock.Manual
}

func newReleaseRepo(t *testing.T) *releaseRepo {
	t.Helper()
	r := &releaseRepo{Repo: tuftest.New(t, nil), ticker: clock.NewManual(time.Now())}
	files := http.FileServer(http.Dir(r.Repo.Repo.Dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.broken.Load() {
			http.Error(w, "repository down", http.StatusServiceUnavailable)
			return
		}
		files.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// release publishes app's version for linux/amd64 with the flags of c (a
// new targets version when it is there already: only its flags change).
func (r *releaseRepo) release(app, version string, flags func(*release.Custom)) {
	r.T.Helper()
	c := release.Custom{App: app, Version: version, OS: "linux", Arch: "amd64"}
	if flags != nil {
		flags(&c)
	}
	r.Add(c, "app.tar.gz", []byte("the release "+app+" "+version))
}

// repoFor is a fixture's releases hook: each controller trusts the
// repository's current root in a trust dir of its own, as
// "controller run --release-repo URL --release-root FILE" sets up.
func (r *releaseRepo) repoFor(t *testing.T) func(id string) *controller.ReleaseRepo {
	return func(id string) *controller.ReleaseRepo {
		dir := filepath.Join(t.TempDir(), "trust-"+id)
		if err := controller.TrustReleaseRoot(dir, r.RootBytes()); err != nil {
			t.Fatal(err)
		}
		return &controller.ReleaseRepo{Client: &release.Client{URL: r.URL, Dir: dir}, Refresh: time.Minute, Ticker: r.ticker}
	}
}

// refresh moves the repository ticker by a refresh period once each of n
// controllers' release loops waits for it: each reads the repository
// (leading) or the catalog (not leading) once more.
func (r *releaseRepo) refresh(t *testing.T, n int) {
	t.Helper()
	if !r.ticker.WaitPending(n, timeout(waitLong)) {
		t.Fatalf("release loops did not re-arm: %d timers pending, want %d", r.ticker.Pending(), n)
	}
	r.ticker.Advance(time.Minute)
	if !r.ticker.WaitPending(n, timeout(waitLong)) {
		t.Fatalf("release loops did not finish: %d timers pending, want %d", r.ticker.Pending(), n)
	}
}

// waitCatalog polls fleet_stats/releases until ok accepts it.
func (f *fixture) waitCatalog(ok func(kv.ReleaseCatalog) error) kv.ReleaseCatalog {
	f.t.Helper()
	var cat kv.ReleaseCatalog
	natstest.Eventually(f.t, waitLong, func() error {
		var err error
		if cat, err = kv.ReadReleaseCatalog(f.ctx, f.srv.Conn("reader")); err != nil {
			return err
		}
		return ok(cat)
	})
	return cat
}

// flagsOf renders the catalog's releases of app as "1.0.0 1.1.0+eol
// 1.2.0+security".
func flagsOf(cat kv.ReleaseCatalog, app string) string {
	var out []string
	for _, r := range cat.Of(app) {
		s := r.Version
		if r.EndOfLife {
			s += "+eol"
		}
		if r.Security {
			s += "+security"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// TestReleaseCatalogFollowsTheRepository (issue 27 point 3): a leader
// controller with a real release repository (served over HTTP, verified by
// go-tuf through pkg/release) writes its releases to fleet_stats/releases;
// a flag flipped in the repository (a new targets version marking 1.0.0
// end of life, then 1.2.0 a security release) reaches the catalog, the
// metrics and the dashboard at the next refresh; the hosts on 1.0.0 and
// 1.1.0 are counted end of life and behind the security release, per
// group and version, by rollout.StandingOf's rule. A repository that fails
// writes the error and keeps the releases; it recovers at the next good
// read. A second controller, not leading, never writes the catalog and
// serves the same figures from it.
func TestReleaseCatalogFollowsTheRepository(t *testing.T) {
	f := newFixture(t)
	f.blueConfig(nil)
	repo := newReleaseRepo(t)
	repo.release("default", "1.0.0", nil)
	repo.release("default", "1.1.0", nil)
	repo.release("default", "1.2.0", func(c *release.Custom) { c.Notes = "<b>fixes</b> &amp; \"quoted\"" })
	repo.release("web", "9.0.0", func(c *release.Custom) { c.EndOfLife = true }) // another app's: not blue's
	f.releases = repo.repoFor(t)
	// Every write of the catalog, and whoever wrote one but c1.
	var writes atomic.Int64
	var strangers atomic.Pointer[string]
	sub, err := f.srv.Conn("watch").Subscribe(kv.KeySubject(kv.BucketStats, kv.KeyReleases), func(m *nats.Msg) {
		var c struct {
			By string `json:"by"`
		}
		if err := json.Unmarshal(m.Data, &c); err != nil || c.By != "c1" {
			by := c.By
			strangers.Store(&by)
		}
		writes.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	rc := f.startController("c1")
	e := f.startDashboard(rc)
	srv := e.serve()
	agents := tenAgents()
	for _, i := range []int{6, 7, 8, 9} {
		agents[i].hb.ActiveVersion = "1.1.0"
	}
	f.publishHeartbeats(rc, agents)
	f.advance(interval) // established
	f.pass()            // c1 leads: it reads the repository at once
	cat := f.waitCatalog(func(c kv.ReleaseCatalog) error {
		if got := flagsOf(c, "default"); got != "1.0.0 1.1.0 1.2.0" {
			return fmt.Errorf("releases %q", got)
		}
		return nil
	})
	if cat.By != "c1" || cat.URL != repo.URL || cat.Error != "" || cat.At.IsZero() || cat.TargetsVersion < 4 || cat.RootVersion != 1 {
		t.Errorf("catalog: by %q url %q error %q at %v targets v%d root v%d", cat.By, cat.URL, cat.Error, cat.At, cat.TargetsVersion, cat.RootVersion)
	}
	if got := flagsOf(cat, "web"); got != "9.0.0+eol" {
		t.Errorf("web's releases %q", got)
	}
	samples := f.waitMetrics(srv.URL, map[string]float64{
		`fleetwave_release_catalog_error`:                   0,
		`fleetwave_release_catalog_releases{app="default"}`: 3,
		`fleetwave_release_refresh_failures_total`:          0,
	})
	for k := range samples {
		if strings.HasPrefix(k, "fleetwave_release_hosts_") {
			t.Errorf("nothing is flagged, yet %s", k)
		}
	}

	// The operator flags 1.0.0 end of life: a new targets version.
	repo.release("default", "1.0.0", func(c *release.Custom) { c.EndOfLife = true })
	repo.refresh(t, 1)
	f.waitCatalog(func(c kv.ReleaseCatalog) error {
		if got := flagsOf(c, "default"); got != "1.0.0+eol 1.1.0 1.2.0" {
			return fmt.Errorf("releases %q", got)
		}
		return nil
	})
	f.waitMetrics(srv.URL, map[string]float64{
		`fleetwave_release_hosts_end_of_life{app="default",group="blue",version="1.0.0"}`: 6,
	})
	// Then 1.2.0 a security release: the hosts on 1.0.0 and 1.1.0 are
	// behind it.
	repo.release("default", "1.2.0", func(c *release.Custom) { c.Security, c.Notes = true, "<b>fixes</b> &amp; \"quoted\"" })
	repo.refresh(t, 1)
	samples = f.waitMetrics(srv.URL, map[string]float64{
		`fleetwave_release_hosts_end_of_life{app="default",group="blue",version="1.0.0"}`:                              6,
		`fleetwave_release_hosts_behind_security{app="default",group="blue",security_release="1.2.0",version="1.0.0"}`: 6,
		`fleetwave_release_hosts_behind_security{app="default",group="blue",security_release="1.2.0",version="1.1.0"}`: 4,
	})
	if _, ok := samples[`fleetwave_release_hosts_end_of_life{app="default",group="blue",version="1.1.0"}`]; ok {
		t.Error("1.1.0 is not end of life, yet it has a fleetwave_release_hosts_end_of_life series")
	}
	good := f.waitCatalog(func(c kv.ReleaseCatalog) error {
		if got := flagsOf(c, "default"); got != "1.0.0+eol 1.1.0 1.2.0+security" {
			return fmt.Errorf("releases %q", got)
		}
		return nil
	})
	success := samples[`fleetwave_release_catalog_success_timestamp_seconds`]
	if want := float64(good.At.UnixMilli()) / 1000; success != want {
		t.Errorf("fleetwave_release_catalog_success_timestamp_seconds %v, want the catalog's at %v", success, want)
	}

	// The dashboard: the releases panel (newest first, with the notes as
	// data) and blue's badges.
	var ov controller.Overview
	getJSON(t, srv.URL+controller.PathAPIStatus, http.StatusOK, &ov)
	if ov.Releases == nil {
		t.Fatal("no releases panel")
	}
	var got []string
	for _, r := range ov.Releases.Releases {
		got = append(got, fmt.Sprintf("%s:%d:eol=%v:sec=%v", r.Version, r.Hosts, r.EndOfLife, r.Security))
	}
	if want := "1.2.0:0:eol=false:sec=true 1.1.0:4:eol=false:sec=false 1.0.0:6:eol=true:sec=false"; strings.Join(got, " ") != want {
		t.Errorf("releases panel %q, want %q", strings.Join(got, " "), want)
	}
	if ov.Releases.Releases[0].Notes != "<b>fixes</b> &amp; \"quoted\"" || ov.Releases.URL != repo.URL || ov.Releases.Error != "" {
		t.Errorf("releases panel: %+v", ov.Releases)
	}
	if len(ov.Versions) != 1 || ov.Versions[0].EndOfLife != 6 || ov.Versions[0].BehindSecurity != 10 || ov.Versions[0].SecurityRelease != "1.2.0" {
		t.Errorf("blue's versions: %+v, want 6 hosts end of life and 10 behind security release 1.2.0", ov.Versions)
	}
	// The notes reach the page escaped (escape.MarshalJSON), never raw.
	_, _, body := httpGet(t, srv.URL+controller.PathAPIStatus)
	if strings.Contains(body, "<b>") {
		t.Errorf("the status JSON holds the notes' markup or escape raw: %s", body)
	}

	// A follower with the same flags: it reads the catalog, never the
	// repository into it, and serves the same figures.
	rc2 := f.startController("c2")
	srv2 := f.serveMetrics(rc2)
	f.publishHeartbeats(rc2, agents)
	f.advance(interval)
	repo.refresh(t, 2)
	f.waitMetrics(srv2, map[string]float64{
		`fleetwave_release_hosts_end_of_life{app="default",group="blue",version="1.0.0"}`:                              6,
		`fleetwave_release_hosts_behind_security{app="default",group="blue",security_release="1.2.0",version="1.1.0"}`: 4,
		`fleetwave_release_catalog_error`: 0,
	})

	// The repository fails: the leader writes the error and when it tried,
	// and keeps the releases and when they were read (its last good read
	// was the follower's first refresh).
	good = f.waitCatalog(func(c kv.ReleaseCatalog) error { return nil })
	success = float64(good.At.UnixMilli()) / 1000
	repo.broken.Store(true)
	f.pass() // the clock moves: the failed try is at a later time
	repo.refresh(t, 2)
	failed := f.waitCatalog(func(c kv.ReleaseCatalog) error {
		if c.Error == "" {
			return fmt.Errorf("no error yet")
		}
		return nil
	})
	if !strings.Contains(failed.Error, "release repository unavailable") || !strings.Contains(failed.Error, "503") {
		t.Errorf("catalog error %q, want the repository unavailable with its 503", failed.Error)
	}
	if got := flagsOf(failed, "default"); got != "1.0.0+eol 1.1.0 1.2.0+security" || !failed.At.Equal(good.At) || !failed.Checked.After(good.At) ||
		failed.TargetsVersion != good.TargetsVersion {
		t.Errorf("after a failed read: releases %q at %v (want %v) checked %v targets v%d (want v%d)",
			got, failed.At, good.At, failed.Checked, failed.TargetsVersion, good.TargetsVersion)
	}
	f.waitMetrics(srv.URL, map[string]float64{
		`fleetwave_release_catalog_error`:                                                 1,
		`fleetwave_release_refresh_failures_total`:                                        1,
		`fleetwave_release_catalog_success_timestamp_seconds`:                             success,
		`fleetwave_release_hosts_end_of_life{app="default",group="blue",version="1.0.0"}`: 6,
	})
	getJSON(t, srv.URL+controller.PathAPIStatus, http.StatusOK, &ov)
	if ov.Releases == nil || ov.Releases.Error != failed.Error || len(ov.Releases.Releases) != 3 {
		t.Errorf("releases panel after the failure: %+v", ov.Releases)
	}
	repo.refresh(t, 2) // the follower reads the failed catalog
	f.waitMetrics(srv2, map[string]float64{`fleetwave_release_catalog_error`: 1})

	// Back: the error goes.
	repo.broken.Store(false)
	repo.refresh(t, 2)
	f.waitCatalog(func(c kv.ReleaseCatalog) error {
		if c.Error != "" || !c.At.After(good.At) {
			return fmt.Errorf("error %q at %v", c.Error, c.At)
		}
		return nil
	})
	f.waitMetrics(srv.URL, map[string]float64{`fleetwave_release_catalog_error`: 0})

	// Only the leader ever wrote the catalog.
	natstest.Eventually(t, waitLong, func() error {
		if n := writes.Load(); n < 6 {
			return fmt.Errorf("%d writes of the catalog seen, want one per read of the leader's", n)
		}
		return nil
	})
	if by := strangers.Load(); by != nil {
		t.Errorf("the catalog was written by %q, want c1's writes only", *by)
	}
}

// TestReleaseCatalogNewLeaderKeepsReleases: a controller that becomes the
// leader while the repository is down keeps the releases its predecessor
// read (it has not read them itself), with the error beside them.
func TestReleaseCatalogNewLeaderKeepsReleases(t *testing.T) {
	f := newFixture(t)
	f.blueConfig(nil)
	repo := newReleaseRepo(t)
	repo.release("default", "1.0.0", func(c *release.Custom) { c.EndOfLife = true })
	// An earlier leader's catalog.
	at := f.clk.Now().Add(-time.Hour).UTC()
	prev := kv.ReleaseCatalog{URL: repo.URL, By: "old", Checked: at, At: at, TargetsVersion: 2,
		Releases: []rollout.Release{{App: "default", Version: "0.9.0"}, {App: "default", Version: "1.0.0", Platforms: []string{"linux-amd64"}, EndOfLife: true}}}
	if err := kv.WriteReleaseCatalog(f.ctx, f.srv.JetStream("old"), prev); err != nil {
		t.Fatal(err)
	}
	repo.broken.Store(true)
	f.releases = repo.repoFor(t)
	f.startController("c1")
	f.pass()
	cat := f.waitCatalog(func(c kv.ReleaseCatalog) error {
		if c.By != "c1" {
			return fmt.Errorf("by %q", c.By)
		}
		return nil
	})
	if cat.Error == "" || !cat.At.Equal(at) || flagsOf(cat, "default") != "0.9.0 1.0.0+eol" || cat.TargetsVersion != 2 {
		t.Errorf("the new leader's catalog: error %q at %v (want %v) releases %q targets v%d", cat.Error, cat.At, at, flagsOf(cat, "default"), cat.TargetsVersion)
	}
}

// TestTrustReleaseRoot: the trust dir keeps what it learnt (a refreshed
// client's state) while it is given the same root, and a root that is not
// one is refused with nothing changed.
func TestTrustReleaseRoot(t *testing.T) {
	repo := newReleaseRepo(t)
	repo.release("default", "1.0.0", nil)
	dir := filepath.Join(t.TempDir(), "trust")
	if err := controller.TrustReleaseRoot(dir, repo.RootBytes()); err != nil {
		t.Fatal(err)
	}
	cl := &release.Client{URL: repo.URL, Dir: dir}
	if _, err := cl.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(dir, "timestamp.json")) {
		t.Fatal("a refresh left no timestamp.json")
	}
	// A restart with the same root: the versions seen are kept.
	if err := controller.TrustReleaseRoot(dir, repo.RootBytes()); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(dir, "timestamp.json")) {
		t.Error("a restart with the same root dropped the trusted timestamp (what makes a rollback detectable)")
	}
	for name, root := range map[string]string{
		"empty":                 "",
		"not JSON":              "hello",
		"not a root":            `{"signed":{"_type":"targets"},"signatures":[]}`,
		"changed after signing": strings.Replace(string(repo.RootBytes()), `"consistent_snapshot": true`, `"consistent_snapshot": false`, 1),
		"a public key":          "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n",
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "root.json")
			writeFile(t, file, root)
			if _, err := controller.ReadReleaseRoot(file); err == nil || !strings.Contains(err.Error(), "--release-root "+file) {
				t.Errorf("ReadReleaseRoot: %v, want an error naming --release-root %s", err, file)
			}
		})
	}
	if _, err := controller.ReadReleaseRoot(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing root: %v", err)
	}
	if !exists(filepath.Join(dir, "timestamp.json")) {
		t.Error("refused roots changed the trust dir")
	}
}

func exists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseAlertsFromTheController (issue 27 point 3): a real Prometheus
// (internal/promtest) scrapes the real controller's /metrics with
// deploy/prometheus's rules loaded: the rules' expressions hold on what
// the controller serves, not only on promtool's made-up series. With hosts
// on an end-of-life version and behind a security release, both alerts go
// pending for blue (their 'for' is longer than a test); with the
// repository down, FleetwaveReleaseRepositoryStale does. Before that, with
// nothing flagged, none is pending.
func TestReleaseAlertsFromTheController(t *testing.T) {
	f := newFixture(t)
	f.blueConfig(nil)
	repo := newReleaseRepo(t)
	repo.release("default", "1.0.0", nil)
	repo.release("default", "1.2.0", nil)
	f.releases = repo.repoFor(t)
	rc := f.startController("c1")
	base := f.serveMetrics(rc) // with the plan mirror: fleetwave_group_* for the security rule's guard
	agents := tenAgents()
	f.publishHeartbeats(rc, agents)
	f.advance(interval)
	f.pass()
	f.waitCatalog(func(c kv.ReleaseCatalog) error {
		if got := flagsOf(c, "default"); got != "1.0.0 1.2.0" {
			return fmt.Errorf("releases %q", got)
		}
		return nil
	})
	rules, err := filepath.Abs("../../deploy/prometheus/fleetwave.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	prom := promtest.Start(t, promtest.Options{Targets: []string{strings.TrimPrefix(base, "http://")}, Job: "fleetwave-controller", RuleFiles: []string{rules}})
	alerts := func() (map[string]bool, error) {
		v, _, _, err := prom.API.Query(context.Background(), `ALERTS{alertname=~"FleetwaveHosts.*|FleetwaveReleaseRepositoryStale"}`, time.Time{})
		if err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for _, s := range v.(model.Vector) {
			out[fmt.Sprintf("%s/%s/%s", s.Metric["alertname"], s.Metric["group"], s.Metric["version"])] = true
		}
		return out, nil
	}
	// Scraped, nothing flagged: no release alert.
	natstest.Eventually(t, 60*time.Second, func() error {
		v, _, _, err := prom.API.Query(context.Background(), `fleetwave_release_catalog_error`, time.Time{})
		if err != nil {
			return err
		}
		if len(v.(model.Vector)) != 1 {
			return fmt.Errorf("fleetwave_release_catalog_error not scraped yet: %v", v)
		}
		return nil
	})
	if got, err := alerts(); err != nil || len(got) > 0 {
		t.Errorf("nothing flagged, yet alerts %v (%v)", got, err)
	}

	repo.release("default", "1.0.0", func(c *release.Custom) { c.EndOfLife = true })
	repo.release("default", "1.2.0", func(c *release.Custom) { c.Security = true })
	repo.refresh(t, 1)
	natstest.Eventually(t, 60*time.Second, func() error {
		got, err := alerts()
		if err != nil {
			return err
		}
		for _, want := range []string{"FleetwaveHostsEndOfLife/blue/1.0.0", "FleetwaveHostsBehindSecurityRelease/blue/1.0.0"} {
			if !got[want] {
				return fmt.Errorf("%s not pending: %v", want, got)
			}
		}
		return nil
	})

	repo.broken.Store(true)
	repo.refresh(t, 1)
	natstest.Eventually(t, 60*time.Second, func() error {
		got, err := alerts()
		if err != nil {
			return err
		}
		if !got["FleetwaveReleaseRepositoryStale//"] {
			return fmt.Errorf("FleetwaveReleaseRepositoryStale not pending: %v", got)
		}
		return nil
	})
}
