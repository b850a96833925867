package kv

import (
	"context"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
}

// GroupStats is the merged view of one group (see MergeStats).
type GroupStats struct {
	Stats
	// Reporting is how many controllers have a fresh entry for the group.
	Reporting int
}

// ReadStats returns every entry of fleet_stats, fresh or not.
func ReadStats(ctx context.Context, b jetstream.KeyValue) ([]Stats, error) {
	var out []Stats
	err := readAll(ctx, b, func(e jetstream.KeyValueEntry) error {
		if e.Key() == KeyLeader {
			return nil
		}
		var s Stats
		if err := decodeEntry(b, e, &s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, err
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
func MergeStats(entries []Stats, now time.Time) []GroupStats {
	byGroup := make(map[string]*GroupStats)
	for _, s := range entries {
		if now.Sub(s.At) > StatsFreshness {
			continue
		}
		g, ok := byGroup[s.Group]
		if !ok {
			byGroup[s.Group] = &GroupStats{Stats: s, Reporting: 1}
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
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}
