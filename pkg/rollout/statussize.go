package rollout

import (
	"encoding/json"
	"fmt"
)

// MaxStatusBytes bounds a group status as stored: its JSON is always
// shorter. Every agent of the group receives the status on every change
// (fleet.plan.group.<g>), and a peer's text in it (a Prometheus label, an
// error) must never make it unwritable: a status over the server's max
// payload once failed every rollout pass.
const MaxStatusBytes = 64 << 10

// MaxGroupQueryBytes bounds the JSON of a group's rendered check queries,
// which the status keeps whole (they say which measurements count), so
// that a status fits MaxStatusBytes with room for the rest of it: up to
// MaxChecks checks, MaxRetryAgents agents, MaxApprovals approvals.
const MaxGroupQueryBytes = 32 << 10

// statusTextLimits are the sizes Bounded cuts free text to, in turn, until
// the status fits.
var statusTextLimits = []int{4096, 1024, 256, 64, 0}

// Bounded returns st as it may be stored, and its JSON. A status whose JSON
// is shorter than MaxStatusBytes is returned as it is. Otherwise its free
// text — the reason, halt reason and waits, each check's detail and series,
// approvals' reasons (and names, down to 64 bytes) and the retry note — is
// cut shorter and shorter (ClipText) until it fits; nothing a decision
// reads (state, versions, counts, canaries, check queries and counts) is
// touched. ErrStatusTooLarge when even with no free text it does not fit:
// the checks' queries are too long, which Config.Validate refuses
// (MaxGroupQueryBytes).
func (st GroupStatus) Bounded() (GroupStatus, []byte, error) {
	data, err := json.Marshal(st)
	if err != nil {
		return st, nil, fmt.Errorf("encode the status of group %q: %w", st.Group, err)
	}
	if len(data) < MaxStatusBytes {
		return st, data, nil
	}
	size := len(data)
	for _, limit := range statusTextLimits {
		cut := st.Clone()
		cut.clipText(limit)
		if data, err = json.Marshal(cut); err != nil {
			return st, nil, fmt.Errorf("encode the status of group %q: %w", st.Group, err)
		}
		if len(data) < MaxStatusBytes {
			return cut, data, nil
		}
	}
	return st, nil, fmt.Errorf("%w: group %q: %d bytes of JSON, at most %d even with its texts cut (%d): "+
		"shorten the group's analysis queries", ErrStatusTooLarge, st.Group, size, MaxStatusBytes-1, len(data))
}

// clipText cuts st's free text to n bytes each; st must own its slices.
func (st *GroupStatus) clipText(n int) {
	for _, s := range []*string{&st.Reason, &st.HaltReason, &st.Waiting, &st.Frozen, &st.Held, &st.DoneHeld, &st.Retry.Note} {
		*s = ClipText(*s, n)
	}
	for i := range st.Approvals {
		a := &st.Approvals[i]
		a.Reason, a.By = ClipText(a.Reason, n), ClipText(a.By, max(n, 64))
	}
	for i := range st.Analysis {
		c := &st.Analysis[i]
		c.Detail, c.Series = ClipText(c.Detail, n), ClipText(c.Series, n)
	}
}
