package fleetctl

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Label selectors in the forecast (issue 28, point 8). The counts of
// fleet_stats are by the group each agent heartbeats in. An agent whose
// labels select another group moves there by itself (agentd, after
// --membership-settle and never mid-install), so the forecast counts it in
// the group its labels select: for a config with selectors it reads the
// agents' last heartbeats (the stream, as agents ls) and moves each such
// agent's count, and says how many it moved. An agent whose labels match
// no selector stays where it heartbeats (the group it was given, which its
// heartbeat does not name once it moved).

// selectorCounts moves, in counts, the agents whose labels select another
// group than the one they heartbeat in, and returns a note saying so ("":
// none moved, or the config has no selectors).
func selectorCounts(ctx context.Context, f appFleet, cfg rollout.Config, counts map[string]rollout.Counts) (string, error) {
	list := rollout.GroupListOf(cfg)
	if !list.HasSelectors() {
		return "", nil
	}
	stored, err := f.LastHeartbeats(ctx, "")
	if err != nil {
		return "", err
	}
	// The last heartbeat of each agent: one that moved still has its old
	// group's last one in the stream until it expires.
	var last []*heartbeat.Heartbeat
	for _, s := range newestPerAgent(stored) {
		if hb, err := s.Decode(); err == nil && !hb.Left {
			last = append(last, hb)
		}
	}
	moves := map[[2]string]int{}
	for _, hb := range last {
		to, selected := list.Member(hb.Labels.Map(), hb.Group)
		if !selected || to == hb.Group {
			continue
		}
		v := hb.Version()
		from := counts[hb.Group]
		fc, ok := from[v]
		if !ok || fc.Count == 0 {
			continue // not counted there (not established yet, or stats older than it)
		}
		fc.Count--
		if hb.Failed() && fc.FailedCount > 0 {
			fc.FailedCount--
		}
		if fc.Count == 0 {
			delete(from, v)
		} else {
			from[v] = fc
		}
		if counts[to] == nil {
			counts[to] = rollout.Counts{}
		}
		tc := counts[to][v]
		tc.Count++
		if hb.Failed() {
			tc.FailedCount++
		}
		counts[to][v] = tc
		moves[[2]string{hb.Group, to}]++
	}
	if len(moves) == 0 {
		return "", nil
	}
	var parts []string
	n := 0
	for _, k := range slices.SortedFunc(maps.Keys(moves), func(a, b [2]string) int {
		return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
	}) {
		parts = append(parts, fmt.Sprintf("%d %s → %s", moves[k], k[0], k[1]))
		n += moves[k]
	}
	return fmt.Sprintf("%d agent(s) counted in the group their labels select, which they move to by themselves (never mid-install): %s",
		n, strings.Join(parts, ", ")), nil
}
