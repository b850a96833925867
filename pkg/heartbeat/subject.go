package heartbeat

import (
	"fmt"
	"strings"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// SubjectPrefix is the subject space of heartbeats: fleet.hb.<group>.<agent_id>.
const SubjectPrefix = "fleet.hb."

// SubjectFor is the subject an agent publishes its heartbeats on.
func SubjectFor(group string, id rollout.AgentID) string {
	return SubjectPrefix + group + "." + string(id)
}

// ParseSubject splits a heartbeat subject into group and agent id.
func ParseSubject(subject string) (group string, id rollout.AgentID, err error) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix)
	if !ok {
		return "", "", fmt.Errorf("%w: subject %q is not under %s", ErrSubjectMismatch, subject, SubjectPrefix)
	}
	group, agent, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(agent, ".") {
		return "", "", fmt.Errorf("%w: subject %q: want %s<group>.<agent_id>", ErrSubjectMismatch, subject, SubjectPrefix)
	}
	return group, rollout.AgentID(agent), nil
}

// DecodeFrom decodes a heartbeat received on subject and rejects it when the
// subject's group or agent id disagree with the body: an agent credential
// that may publish only on its own subject must not be able to speak for
// another agent or group.
func DecodeFrom(subject string, data []byte) (*Heartbeat, error) {
	group, id, err := ParseSubject(subject)
	if err != nil {
		return nil, err
	}
	h, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if err := matchSubject(h, group, id); err != nil {
		return nil, err
	}
	return h, nil
}

func matchSubject(h *Heartbeat, group string, id rollout.AgentID) error {
	if h.Group != group || h.AgentID != id {
		return fmt.Errorf("%w: subject says group %q agent %q, body says group %q agent %q",
			ErrSubjectMismatch, group, id, h.Group, h.AgentID)
	}
	return nil
}
