package rollout

import (
	"slices"
	"strings"
)

// Release is one version of one app in the release repository, as its
// verified targets metadata names it (pkg/release reads it; the controller
// keeps the list in fleet_stats/releases for fleetctl and the dashboard).
type Release struct {
	App     string `json:"app"`
	Version string `json:"version"`
	// Platforms lists "<os>-<arch>" it was published for, sorted.
	Platforms []string `json:"platforms"`
	// Security marks a release that fixes a security problem: hosts of the
	// app on an older version are behind a security release.
	Security bool `json:"security,omitempty"`
	// EndOfLife marks a version no host should still run.
	EndOfLife bool `json:"end_of_life,omitempty"`
	// Notes is the operator's free text (data: escape it on terminals).
	Notes string `json:"notes,omitempty"`
}

// SortReleases orders rs by app, then version (semver, oldest first).
func SortReleases(rs []Release) {
	slices.SortFunc(rs, func(a, b Release) int {
		if c := strings.Compare(a.App, b.App); c != 0 {
			return c
		}
		return CompareVersions(a.Version, b.Version)
	})
}

// VersionStanding is what the release repository says of a version hosts
// run.
type VersionStanding struct {
	// Known: the repository has this version of the app.
	Known bool
	// EndOfLife: the repository flags it end of life.
	EndOfLife bool
	// SecurityRelease is the newest release flagged security that is newer
	// than this version ("" when none is): a host on this version lacks a
	// security fix.
	SecurityRelease string
}

// StandingOf says what rs (one repository's releases, any apps) says of
// app's version.
func StandingOf(rs []Release, app, version string) VersionStanding {
	var s VersionStanding
	for _, r := range rs {
		if r.App != app {
			continue
		}
		if r.Version == version {
			s.Known, s.EndOfLife = true, r.EndOfLife
		}
		if r.Security && ValidateVersion(version) == nil && CompareVersions(r.Version, version) > 0 &&
			(s.SecurityRelease == "" || CompareVersions(r.Version, s.SecurityRelease) > 0) {
			s.SecurityRelease = r.Version
		}
	}
	return s
}
