package httpfind

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Answer is the body of a 200 from GET /v1/find (DESIGN §5, RFD 169 "REST
// Endpoints"). It has exactly these four fields: nothing about the agent
// itself, so a holder of an agent id learns when that host is due to update,
// never what it runs.
type Answer struct {
	// Version is what the agent should run; new installs use it even when
	// Update is false. Empty: the plan names no valid target, keep what you
	// have.
	Version string `json:"agent_version"`
	// Update says whether the agent should update to Version now.
	Update bool `json:"agent_autoupdate"`
	// JitterSeconds is the longest random delay before updating (the
	// group's jitter_seconds).
	JitterSeconds int `json:"agent_update_jitter_seconds"`
	// Edition names the build serving the fleet ("oss" by default).
	Edition string `json:"edition"`
}

// Find is the answer for agent id of group under p, with Edition left empty
// for the caller to fill. It is rollout.Decide with the same arguments agentd
// passes from the bus (the group status's Mode as the mode), so both paths
// give one answer.
//
// A group the config does not name (p.Configured) is an *UnknownGroupError,
// whether or not there is a spec: its agents would never be updated, and a
// typo in a host's update.yaml must be seen, not answered "no update". A
// configured group the plan has no status for yet is answered as an
// unstarted group of the spec: Decide reads the zero status as unstarted,
// which is what agentd does before the controller has written the group.
//
// A group the config does not name whose status follows the catch-all
// group (rollout.GroupStatus.Follows: the controller copied the catch-all's
// status under its key) is answered from that copy, as agentd is on the
// bus.
//
// Without a spec the answer is ErrNoPlan.
func (p *Plan) Find(id rollout.AgentID, group string) (Answer, error) {
	if p.Configured != nil && !slices.Contains(p.Configured, group) && p.Groups[group].Follows == "" {
		return Answer{}, &UnknownGroupError{Group: group, Known: slices.Clone(p.Configured)}
	}
	if !p.HasSpec {
		return Answer{}, ErrNoPlan
	}
	st := p.Groups[group]
	v, update := rollout.Decide(id, p.Spec, st, st.Mode)
	return Answer{Version: v, Update: update, JitterSeconds: st.JitterSeconds}, nil
}

// UnknownGroupError is Find's answer for a group the config does not name.
// errors.Is(err, ErrUnknownGroup) holds.
type UnknownGroupError struct {
	Group string
	// Known are the config's groups, in its order.
	Known []string
}

// Error names the group, the groups there are, the closest of them, and
// the two fixes.
func (e *UnknownGroupError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %q: not in the rollout config, so its agents are never updated", ErrUnknownGroup, e.Group)
	if near, ok := rollout.ClosestGroupName(e.Group, e.Known); ok {
		fmt.Fprintf(&b, " (did you mean %q?)", near)
	}
	fmt.Fprintf(&b, "; the config's groups are: %s; fix the group in the agent's update.yaml, or add it: fleetctl config add-group --group %s",
		strings.Join(e.Known, ", "), e.Group)
	return b.String()
}

func (e *UnknownGroupError) Unwrap() error { return ErrUnknownGroup }

// maxJitterSeconds bounds a jitter the client accepts. Wider than the
// config's 0-3600 so that a newer controller may widen the range, but a
// day's wait is not a jitter: it is garbage.
const maxJitterSeconds = 86400

// wireAnswer has pointers where a missing field must be told from a zero one.
type wireAnswer struct {
	Version       *string `json:"agent_version"`
	Update        *bool   `json:"agent_autoupdate"`
	JitterSeconds int     `json:"agent_update_jitter_seconds"`
	Edition       string  `json:"edition"`
}

// DecodeAnswer reads a find answer. Unknown fields are skipped (a newer
// controller may add some), but agent_version and agent_autoupdate must be
// there, the version must be a valid one or empty, an update must name a
// version, and the jitter must be sane: an agent acts on this, so anything
// short of a real answer is an error, never "update to nothing".
func DecodeAnswer(b []byte) (Answer, error) {
	var w wireAnswer
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&w); err != nil {
		return Answer{}, fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	if d.More() {
		return Answer{}, fmt.Errorf("%w: data after the JSON object", ErrBadAnswer)
	}
	var versionErr error
	if w.Version != nil && *w.Version != "" {
		versionErr = rollout.ValidateVersion(*w.Version)
	}
	switch {
	case w.Version == nil:
		return Answer{}, fmt.Errorf("%w: agent_version missing", ErrBadAnswer)
	case w.Update == nil:
		return Answer{}, fmt.Errorf("%w: agent_autoupdate missing", ErrBadAnswer)
	case versionErr != nil:
		return Answer{}, fmt.Errorf("%w: agent_version: %v", ErrBadAnswer, versionErr)
	case *w.Update && *w.Version == "":
		return Answer{}, fmt.Errorf("%w: agent_autoupdate is true but agent_version is empty", ErrBadAnswer)
	case w.JitterSeconds < 0 || w.JitterSeconds > maxJitterSeconds:
		return Answer{}, fmt.Errorf("%w: agent_update_jitter_seconds %d must be 0-%d", ErrBadAnswer, w.JitterSeconds, maxJitterSeconds)
	}
	return Answer{Version: *w.Version, Update: *w.Update, JitterSeconds: w.JitterSeconds, Edition: w.Edition}, nil
}
