package controller

import (
	"slices"
	"time"

	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The release repository on the dashboard (issue 27): a panel of the
// app's releases with their flags and the catalog's age and error, and on
// each group's versions how many hosts run an end-of-life version or one
// behind a security release. Everything in the catalog is the
// repository's data (notes are free text): the page puts it on as text.

// ReleasesPanel is the JSON of Overview.Releases: the release catalog
// (fleet_stats/releases) as far as it is about the page's app.
type ReleasesPanel struct {
	// URL is the repository read.
	URL string `json:"url"`
	// At is when it was last read successfully (absent: never); Age says
	// how long ago ("3m"; "never").
	At  time.Time `json:"at,omitzero"`
	Age string    `json:"age"`
	// Checked is when the leader last tried; Error that try's error
	// (absent when it succeeded: the releases are from At).
	Checked time.Time `json:"checked"`
	Error   string    `json:"error,omitempty"`
	// Expires is when the metadata read expires; TargetsVersion the
	// version of the targets metadata the releases are from.
	Expires        time.Time `json:"expires,omitzero"`
	TargetsVersion int64     `json:"targets_version,omitempty"`
	// Releases are the app's releases, newest first; [] for none.
	Releases []ReleaseItem `json:"releases"`
	// Skipped counts the repository's targets that name no release.
	Skipped int `json:"skipped,omitempty"`
}

// ReleaseItem is one release of the app and how many of its counted hosts
// run it.
type ReleaseItem struct {
	rollout.Release
	Hosts int `json:"hosts"`
}

// releasesPanel is cat's panel for app at now; hosts counts the app's
// agents per version.
func releasesPanel(cat *kv.ReleaseCatalog, app string, hosts map[string]int, now time.Time) *ReleasesPanel {
	p := &ReleasesPanel{URL: cat.URL, At: cat.At, Age: "never", Checked: cat.Checked, Error: cat.Error, Expires: cat.Expires,
		TargetsVersion: cat.TargetsVersion, Skipped: cat.Skipped, Releases: []ReleaseItem{}}
	if !cat.At.IsZero() {
		p.Age = view.Age(now, cat.At)
	}
	for _, r := range cat.Of(app) {
		p.Releases = append(p.Releases, ReleaseItem{Release: r, Hosts: hosts[r.Version]})
	}
	slices.Reverse(p.Releases) // the catalog is oldest first
	return p
}

// markStanding marks each version of gv with what the catalog says of it
// (rollout.StandingOf) and counts the group's hosts on an end-of-life
// version and behind a security release.
func markStanding(gv *GroupVersions, rs []rollout.Release, app string) {
	for i := range gv.Versions {
		v := &gv.Versions[i]
		s := rollout.StandingOf(rs, app, v.Version)
		v.EndOfLife, v.SecurityRelease = s.EndOfLife, s.SecurityRelease
		if s.EndOfLife {
			gv.EndOfLife += v.Count
		}
		if s.SecurityRelease != "" {
			gv.BehindSecurity += v.Count
			if gv.SecurityRelease == "" || rollout.CompareVersions(s.SecurityRelease, gv.SecurityRelease) > 0 {
				gv.SecurityRelease = s.SecurityRelease
			}
		}
	}
}

// addReleases puts the release catalog, when the controller has one, on
// ov: the panel, and the marks on its versions.
func (c *Controller) addReleases(ov *Overview, now time.Time) {
	if c.releases == nil {
		return
	}
	cat := c.catalog.Load()
	if cat == nil {
		return
	}
	rs := cat.Of(ov.App)
	hosts := map[string]int{}
	for i := range ov.Versions {
		markStanding(&ov.Versions[i], rs, ov.App)
		for _, v := range ov.Versions[i].Versions {
			hosts[v.Version] += v.Count
		}
	}
	ov.Releases = releasesPanel(cat, ov.App, hosts, now)
}
