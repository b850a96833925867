package heartbeat

import (
	"fmt"
	"strings"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// SubjectPrefix is the subject space of heartbeats: fleet.hb.<group>.<agent_id>
// for the fleet's default app, fleet.hb.<app>.<group>.<agent_id> for every
// other app (DESIGN §9; rollout.Config.DefaultApp says why the default app's
// carry no app name).
const SubjectPrefix = "fleet.hb."

// SubjectFor is the subject an agent publishes the default app's
// heartbeats on.
func SubjectFor(group string, id rollout.AgentID) string {
	return SubjectPrefix + group + "." + string(id)
}

// SubjectForApp is the subject an agent publishes app's heartbeats on; app
// "" is the default app (SubjectFor).
func SubjectForApp(app, group string, id rollout.AgentID) string {
	if app == "" {
		return SubjectFor(group, id)
	}
	return SubjectPrefix + app + "." + group + "." + string(id)
}

// ParseSubject splits a default app's heartbeat subject into group and agent
// id; another app's subject is refused (ParseAppSubject takes both).
func ParseSubject(subject string) (group string, id rollout.AgentID, err error) {
	app, group, id, err := ParseAppSubject(subject)
	if err == nil && app != "" {
		return "", "", fmt.Errorf("%w: subject %q: want %s<group>.<agent_id>", ErrSubjectMismatch, subject, SubjectPrefix)
	}
	return group, id, err
}

// ParseAppSubject splits a heartbeat subject into app ("" for the default
// app's), group and agent id.
func ParseAppSubject(subject string) (app, group string, id rollout.AgentID, err error) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix)
	if !ok {
		return "", "", "", fmt.Errorf("%w: subject %q is not under %s", ErrSubjectMismatch, subject, SubjectPrefix)
	}
	parts := strings.Split(rest, ".")
	switch {
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return "", parts[0], rollout.AgentID(parts[1]), nil
	case len(parts) == 3 && parts[0] != "" && parts[1] != "" && parts[2] != "":
		return parts[0], parts[1], rollout.AgentID(parts[2]), nil
	}
	return "", "", "", fmt.Errorf("%w: subject %q: want %s[<app>.]<group>.<agent_id>", ErrSubjectMismatch, subject, SubjectPrefix)
}

// DecodeFrom decodes a heartbeat received on subject and rejects it when the
// subject's app, group or agent id disagree with the body: an agent
// credential that may publish only on its own subjects must not be able to
// speak for another agent, group or app.
func DecodeFrom(subject string, data []byte) (*Heartbeat, error) {
	app, group, id, err := ParseAppSubject(subject)
	if err != nil {
		return nil, err
	}
	h, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if err := matchSubject(h, app, group, id); err != nil {
		return nil, err
	}
	return h, nil
}

func matchSubject(h *Heartbeat, app, group string, id rollout.AgentID) error {
	if h.App != app || h.Group != group || h.AgentID != id {
		return fmt.Errorf("%w: subject says app %q group %q agent %q, body says app %q group %q agent %q",
			ErrSubjectMismatch, app, group, id, h.App, h.Group, h.AgentID)
	}
	return nil
}
