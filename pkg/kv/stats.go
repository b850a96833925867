package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// StatsFreshness is how old a fleet_stats entry may be and still count. An
// entry older than this belongs to a controller that stopped or lost the bus.
const StatsFreshness = time.Minute

// Stats is one controller's count of one group: the value at
// fleet_stats/<group>.<controller_id>.
type Stats struct {
	V            int            `json:"v"`
	ControllerID string         `json:"controller_id"`
	Group        string         `json:"group"`
	At           time.Time      `json:"at"`
	Agents       int            `json:"agents"`
	Versions     rollout.Counts `json:"versions"`
	// Sites break the same agents down by site (rollout.SiteCounts: at
	// most rollout.MaxSites sites, per version, without lowest ids);
	// absent when none of the group's agents names a site.
	Sites rollout.SiteCounts `json:"sites,omitempty"`
	// App is the app's token in keys (AppNS.Key): empty, and left out, for
	// the default app, whose key is <group>.<controller_id>; another
	// app's is <app>.<group>.<controller_id>.
	App string `json:"app,omitempty"`
}

// StatsOf are the entries of ns's app among entries.
func StatsOf(entries []Stats, ns AppNS) []Stats {
	out := make([]Stats, 0, len(entries))
	for _, e := range entries {
		if e.App == ns.Key() {
			out = append(out, e)
		}
	}
	return out
}

// GroupStats is the merged view of one group (see MergeStats).
type GroupStats struct {
	Stats
	// Reporting is how many controllers have a fresh entry for the group.
	Reporting int
}

// DecodeStats decodes and validates the value of fleet_stats key
// <group>.<controller_id>. A value without "v": 1, without a valid group,
// a controller id or a time, with a count that is negative or a version
// that is not one, or whose group and controller id do not make its key
// (another group's count stored under this key) is ErrCorrupt.
func DecodeStats(key string, data []byte) (Stats, error) {
	var s Stats
	if err := checkSchema(data); err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return Stats{}, corrupt("%v", err)
	}
	var errs []error
	if err := rollout.ValidateGroupName(s.Group); err != nil {
		errs = append(errs, fmt.Errorf("group: %w", err))
	}
	if s.ControllerID == "" {
		errs = append(errs, errors.New("controller_id: empty"))
	}
	if s.At.IsZero() {
		errs = append(errs, errors.New("at: missing"))
	}
	if s.Agents < 0 {
		errs = append(errs, fmt.Errorf("agents %d: negative", s.Agents))
	}
	for v, c := range s.Versions {
		if v != rollout.NoVersion {
			if err := rollout.ValidateVersion(v); err != nil {
				errs = append(errs, fmt.Errorf("versions: %w", err))
			}
		}
		if c.Count < 0 || c.FailedCount < 0 || c.Updating < 0 || c.Blocked < 0 || c.Unreachable < 0 || c.Unreachable > c.Count {
			errs = append(errs, fmt.Errorf("versions: %q: negative count, or more unreachable than counted", v))
		}
	}
	if len(s.Sites) > rollout.MaxSites+2 {
		errs = append(errs, fmt.Errorf("sites: %d, at most %d", len(s.Sites), rollout.MaxSites+2))
	}
	for site, counts := range s.Sites {
		if site != rollout.NoSite && site != rollout.OtherSites {
			if err := rollout.ValidateSite(site); err != nil {
				errs = append(errs, fmt.Errorf("sites: %w", err))
				continue
			}
		}
		for v, c := range counts {
			if v != rollout.NoVersion {
				if err := rollout.ValidateVersion(v); err != nil {
					errs = append(errs, fmt.Errorf("sites: %q: %w", site, err))
				}
			}
			if c.Count < 0 || c.FailedCount < 0 || c.Updating < 0 || c.Unreachable < 0 || c.Unreachable > c.Count {
				errs = append(errs, fmt.Errorf("sites: %q: %q: negative count, or more unreachable than counted", site, v))
			}
		}
	}
	if s.App != "" {
		if err := rollout.ValidateAppName(s.App); err != nil {
			errs = append(errs, fmt.Errorf("app: %w", err))
		}
	}
	if want := (AppNS{Name: s.App, key: s.App}).Stats(s.Group, s.ControllerID); len(errs) == 0 && key != want {
		errs = append(errs, fmt.Errorf("the count of group %q by controller %q (key %s) stored under key %s",
			s.Group, s.ControllerID, want, key))
	}
	if err := errors.Join(errs...); err != nil {
		return Stats{}, corrupt("%v", err)
	}
	return s, nil
}

// ReadValidStats returns every valid entry of fleet_stats, fresh or not,
// and the entries it skipped because they are not what their key should
// hold (DecodeStats, or a foreign message). The error is for the bus only.
// The leader lease (KeyLeader), the attribution check's state
// (KeyAttribution), the release catalog (KeyReleases) and the webhooks' cursors (IsWebhookCursorKey) are not
// stats entries and are neither returned nor
// judged. The bucket keeps one message per key, so a scan of the stream
// (batched direct gets, no consumer) reads exactly the current entries.
func (f *Fleet) ReadValidStats(ctx context.Context) ([]Stats, []Problem, error) {
	var out []Stats
	var skipped []Problem
	_, err := ScanFrom(ctx, f.JS.Conn(), StreamOf(BucketStats), KeySubject(BucketStats, ">"), 1, func(m StoredMsg) error {
		key, ok := KeyOfSubject(BucketStats, m.Subject)
		if !ok || key == KeyLeader || key == KeyAttribution || key == KeyReleases || IsWebhookCursorKey(key) || m.Deleted {
			return nil
		}
		if m.Foreign {
			skipped = append(skipped, Problem{Bucket: BucketStats, Key: key, Revision: m.Sequence, Err: ErrForeign})
			return nil
		}
		s, err := DecodeStats(key, m.Data)
		if err != nil {
			skipped = append(skipped, Problem{Bucket: BucketStats, Key: key, Revision: m.Sequence, Err: err})
			return nil
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", BucketStats, err)
	}
	return out, skipped, nil
}

// ReadStats returns every entry of fleet_stats, fresh or not. An entry that
// is not what its key should hold is a *Problem (ErrCorrupt): callers that
// carry on past bad entries use ReadValidStats.
func (f *Fleet) ReadStats(ctx context.Context) ([]Stats, error) {
	out, skipped, err := f.ReadValidStats(ctx)
	if err != nil {
		return nil, err
	}
	if len(skipped) > 0 {
		errs := make([]error, len(skipped))
		for i := range skipped {
			errs[i] = &skipped[i]
		}
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// MergeStats turns all controllers' entries into one view per group, sorted
// by group name. Entries older than StatsFreshness at now are ignored.
//
// Every controller reads the whole heartbeat stream, so each entry is a
// complete count of its group, not a share of it: adding two controllers'
// entries would count every agent twice. The merge therefore takes, per
// group, the newest fresh entry. (RFD 169 sums because there each auth server
// counts only the agents connected to it; here the inventory is shared.)
//
// Each app's counts are its own (Stats.App): two apps' entries for groups of
// one name are two views (the default app's first), never one. Callers
// that show one app pass StatsOf(entries, ns).
func MergeStats(entries []Stats, now time.Time) []GroupStats {
	type appGroup struct{ app, group string }
	byGroup := make(map[appGroup]*GroupStats)
	for _, s := range entries {
		if now.Sub(s.At) > StatsFreshness {
			continue
		}
		k := appGroup{s.App, s.Group}
		g, ok := byGroup[k]
		if !ok {
			byGroup[k] = &GroupStats{Stats: s, Reporting: 1}
			continue
		}
		g.Reporting++
		if s.At.After(g.At) {
			g.Stats = s
		}
	}
	out := make([]GroupStats, 0, len(byGroup))
	for _, g := range byGroup {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].App < out[j].App
	})
	return out
}
