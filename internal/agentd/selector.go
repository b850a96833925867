package agentd

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// Membership by labels (issue 28, point 8; docs/agent.md, "Labels and
// selector groups"). The leader publishes the app's groups and their
// selectors on the groups key (kv.AppNS.Groups); agentd follows it with
// the plan and decides its own group: the first group whose selector its
// labels match, else the group it was given (rollout.GroupList.Member).
//
// Hysteresis: the host moves only when
//   - the group its labels select has stayed the same for
//     MembershipSettle (default DefaultMembershipSettle) on the agent's
//     clock, measured from the first evaluation that selected it, so a
//     label that flaps, or a selector being edited, moves nobody; and
//   - no install is in progress: the update loop is between installs (the
//     move is made by the update loop itself, which never installs at the
//     same time), nothing is being installed (updating_to) and the
//     journal is idle. A move due during an install waits for its end.
// Then it records the group in update.yaml (spec.selected_group), follows
// the new group's status and heartbeats on the new group's subject: the
// controllers count it there from its next heartbeat.
//
// Credentials: an agent's credentials name the groups it may heartbeat in
// (fleetctl auth agent --may-join). agentd reads its own credentials and
// follows the groups key only when they allow it, and never moves to a
// group whose heartbeat subject they do not allow: it says so instead.

// DefaultMembershipSettle is how long the group a host's labels select
// must stay the same before the host moves to it.
const DefaultMembershipSettle = time.Minute

// membership is the state of an agent's membership by labels (owned by
// its membership loop; want and since read by the update loop's move under
// Agent.mu).
type membership struct {
	// want is the group the labels select, different from the agent's
	// own, since when it has been so.
	want  string
	since time.Time
	// noted is the last deferred move logged, so each is said once.
	noted string
	// moves carries a due move to the update loop (nil: the agent has
	// none, the membership loop moves itself).
	moves chan string
	// kick re-evaluates at once (an install ended).
	kick chan struct{}
}

// creds is what the agent's credentials allow it to publish; nil: no
// credentials (an open bus), everything.
type credPerms struct {
	allow, deny []string
}

// readCredPerms reads the publish permissions of a creds file (nil for no
// file, or one that does not parse: the server judges it anyway).
func readCredPerms(path string) *credPerms {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	tok, err := jwt.ParseDecoratedJWT(data)
	if err != nil {
		return nil
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return nil
	}
	return &credPerms{allow: uc.Pub.Allow, deny: uc.Pub.Deny}
}

// may reports whether subject may be published.
func (p *credPerms) may(subject string) bool {
	if p == nil {
		return true
	}
	allowed := len(p.allow) == 0
	for _, a := range p.allow {
		if subjectMatch(a, subject) {
			allowed = true
			break
		}
	}
	for _, d := range p.deny {
		if subjectMatch(d, subject) {
			return false
		}
	}
	return allowed
}

// subjectMatch reports whether NATS subject pattern (with '*' and '>')
// matches the literal subject.
func subjectMatch(pattern, subject string) bool {
	return jwt.Subject(subject).IsContainedIn(jwt.Subject(pattern))
}

// planDirectGetSubject is the API subject of a direct get of a plan key.
func planDirectGetSubject(key string) string {
	return "$JS.API.DIRECT.GET." + kv.PlanStream + "." + kv.KeySubject(kv.BucketPlan, key)
}

// followsGroups reports whether the agent's credentials let it read the
// groups key (credentials minted before label selectors do not).
func (a *Agent) followsGroups() bool {
	return readCredPerms(a.o.Creds).may(planDirectGetSubject(a.ns().Groups()))
}

// mayJoin reports whether the agent's credentials let it heartbeat in
// group.
func (a *Agent) mayJoin(group string) bool {
	return readCredPerms(a.o.Creds).may(a.ns().HBSubject(group, a.id))
}

// installing reports whether an install is in progress: being installed
// (updating_to) or the journal not idle.
func (a *Agent) installing() bool {
	a.mu.Lock()
	busy := a.updatingTo != ""
	a.mu.Unlock()
	if busy {
		return true
	}
	if a.installer == nil {
		return false
	}
	j, err := install.LoadJournal(a.tree())
	return err != nil || j != nil && j.Step != install.StepUndone
}

// membershipSettle is the hysteresis time.
func (a *Agent) membershipSettle() time.Duration {
	if a.o.MembershipSettle > 0 {
		return a.o.MembershipSettle
	}
	return DefaultMembershipSettle
}

// membershipLoop re-evaluates the agent's group whenever the groups key
// changes, the labels change (the labels file, re-read every heartbeat
// interval when there is one), an install ends, or a pending move's
// settle time is over. It arms no timer while there is nothing to do.
func (a *Agent) membershipLoop(ctx context.Context, f *PlanFollower) error {
	var tick clock.Timer
	if a.labelsFile() != "" {
		tick = a.o.Clock.NewTimer(a.o.Interval)
		defer tick.Stop()
	}
	var settle clock.Timer
	defer func() {
		if settle != nil {
			settle.Stop()
		}
	}()
	for {
		var tickC, settleC <-chan time.Time
		if tick != nil {
			tickC = tick.C()
		}
		if settle != nil {
			settleC = settle.C()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.GroupsChanged():
		case <-a.member.kick:
		case <-tickC:
			if a.refreshLabels() && a.pub != nil {
				a.pub.Kick() // the new labels go out now
			}
			tick.Reset(a.o.Interval)
		case <-settleC:
			settle = nil
		}
		wait := a.evaluate(f)
		if wait > 0 && settle == nil {
			settle = a.o.Clock.NewTimer(wait)
		}
	}
}

// labelsFile is the saved labels file.
func (a *Agent) labelsFile() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.update.Spec.LabelsFile
}

// evaluate applies the membership rule now; it returns how long until a
// pending move's settle time is over (0: none pending, or it is over).
func (a *Agent) evaluate(f *PlanFollower) time.Duration {
	list, known := f.Groups()
	if !known {
		return 0
	}
	now := a.o.Clock.Now()
	a.mu.Lock()
	given, cur, labels := a.update.Spec.Group, a.groupLocked(), a.labels
	m := &a.member
	want, _ := list.Member(labels.Map(), given)
	if want == cur {
		if m.want != "" {
			a.o.Log.Info("labels select this host's group again; no move", slog.String("group", cur), slog.String("was_moving_to", m.want))
		}
		m.want, m.noted = "", ""
		a.mu.Unlock()
		return 0
	}
	if m.want != want {
		m.want, m.since, m.noted = want, now, ""
		a.mu.Unlock()
		a.o.Log.Info("labels select another group; moving once that holds and no install runs",
			slog.String("from", cur), slog.String("to", want), slog.String("labels", labels.String()), slog.Duration("settle", a.membershipSettle()))
		return a.membershipSettle()
	}
	held := now.Sub(m.since)
	a.mu.Unlock()
	if left := a.membershipSettle() - held; left > 0 {
		return left
	}
	switch {
	case !a.mayJoin(want):
		a.noteOnce(want+" creds", "labels select a group this host's credentials may not heartbeat in; staying",
			slog.String("group", cur), slog.String("selected", want),
			slog.String("fix", "fleetctl auth agent --id "+string(a.id)+" --group "+given+" --may-join "+want+" (or '*'), and give the host the new creds"))
		return 0
	case a.installing():
		a.noteOnce(want+" install", "move deferred: an install is in progress", slog.String("from", cur), slog.String("to", want))
		return 0 // the install's end kicks the loop
	}
	if m.moves != nil {
		select {
		case m.moves <- want:
		default: // one is queued already
		}
		return 0
	}
	a.moveGroup(f, want)
	return 0
}

func (a *Agent) noteOnce(key, msg string, attrs ...any) {
	a.mu.Lock()
	logIt := a.member.noted != key
	a.member.noted = key
	a.mu.Unlock()
	if logIt {
		a.o.Log.Warn(msg, attrs...)
	}
}

// kickMembership re-evaluates membership soon (an install ended).
func (a *Agent) kickMembership() {
	if a.member.kick == nil {
		return
	}
	select {
	case a.member.kick <- struct{}{}:
	default:
	}
}

// moveGroup moves the agent to group, if it is still what the labels
// select and no install is in progress: records it in update.yaml,
// follows the group's status, heartbeats on its subject at once. The
// update loop calls it between installs (or the membership loop, for an
// agent that installs nothing).
func (a *Agent) moveGroup(f *PlanFollower, group string) {
	if a.installing() {
		a.kickMembership() // not now: after the install
		return
	}
	a.mu.Lock()
	if a.member.want != group {
		a.mu.Unlock()
		return // the labels changed their mind meanwhile
	}
	from := a.groupLocked()
	prev := a.update.Spec.SelectedGroup
	if group == a.update.Spec.Group {
		a.update.Spec.SelectedGroup = ""
	} else {
		a.update.Spec.SelectedGroup = group
	}
	err := a.update.Save(a.dir())
	if err != nil {
		a.update.Spec.SelectedGroup = prev
		a.mu.Unlock()
		a.o.Log.Error("cannot record the move to another group; staying", slog.String("group", from), slog.String("to", group), slog.Any("err", err))
		return
	}
	a.loaded.SelectedGroup = a.update.Spec.SelectedGroup
	a.member.want, a.member.noted = "", ""
	labels := a.labels
	a.mu.Unlock()
	if err := f.SetGroup(group); err != nil {
		a.o.Log.Error("following the new group's status failed; the plan refresh retries", slog.String("group", group), slog.Any("err", err))
	}
	a.o.Log.Info("moved to the group this host's labels select", slog.String("from", from), slog.String("to", group), slog.String("labels", labels.String()))
	if a.pub != nil {
		a.pub.Kick()
	}
}
