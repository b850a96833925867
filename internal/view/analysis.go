package view

import (
	"fmt"
	"time"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// AnalysisNotes are one line per metric analysis check of a group rolling
// out (canary or active): its last measurement, its passes against its
// count, and how long ago it was measured, as "check errors: 0.002 meets
// success < 0.01, passed 2 of 3, measured 5s ago". None for a group that
// is not rolling out, or a stale status.
func AnalysisNotes(r *GroupRollout, now time.Time) []string {
	if r == nil || r.Stale || !r.State.InProgress() {
		return nil
	}
	var out []string
	for _, c := range r.Analysis {
		out = append(out, "check "+c.Name+": "+describeCheck(c, r.State, now))
	}
	return out
}

func describeCheck(c rollout.CheckStatus, state rollout.State, now time.Time) string {
	if c.Measurements == 0 {
		if state == rollout.StateCanary {
			return fmt.Sprintf("not measured yet (runs once every canary is healthy on the target; needs %d passes)", c.Count)
		}
		return "not measured yet"
	}
	var s string
	switch c.Result {
	case rollout.ResultInconclusive:
		s = fmt.Sprintf("inconclusive, %d of inconclusive_limit %d in a row: %s", c.Inconclusive, c.InconclusiveLimit, c.Detail)
	case rollout.ResultFailed:
		s = "failed: " + c.Detail
	default:
		s = c.Detail
	}
	if c.Series != "" {
		s += " (series " + c.Series + ")"
	}
	if state == rollout.StateCanary {
		s += fmt.Sprintf(", passed %d of %d", c.Passes, c.Count)
	} else {
		s += fmt.Sprintf(", %d of %d measurements passed", c.Passes, c.Measurements)
	}
	return s + ", measured " + Age(now, c.At) + " ago"
}
