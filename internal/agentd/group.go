package agentd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// A host enabled with a group the rollout config does not name is never
// updated, and nothing else would say so: agentd asks. The controllers know
// the config's groups; an agent may read only the plan spec and its own
// group's status on the bus (docs/security.md), so it learns it two ways:
//
//   - on the bus, the controller writes a status for every group of the
//     config once a plan is set, so a spec without a status for this
//     group means the config does not name it (or no controller has run
//     since the group was added);
//   - the find endpoint (update.yaml find_urls), asked only then (or when
//     the bus cannot be read), answers an unknown group with 404 and the
//     config's groups: authoritative.
//
// 'agentd run' logs it after every full read of the plan (at start, after a
// reconnect, every few minutes) when it changes, 'agentd status' shows it
// as group_error, and 'agentd enable' warns.

// groupCheckTimeout bounds the find endpoint's answer to a group check.
const groupCheckTimeout = 5 * time.Second

// groupProblem says why this host's group gets nothing from the rollout
// ("" when it does, or when that cannot be told). confirmed is true when a
// controller's find endpoint said so; p is the plan read from the bus, or
// nil. The find endpoint is asked only when the plan does not show the
// group (or could not be read): a fleet's agents must not poll the
// controllers while the bus serves them.
func (a *Agent) groupProblem(ctx context.Context, p *Plan) (problem string, confirmed bool) {
	group := a.Group()
	if p != nil && p.StatusRev != 0 && p.Status.Follows != "" {
		// Rolled out, but with another group: worth saying, for a typo
		// in --group is caught by the catch-all group too.
		return fmt.Sprintf("group %q is not in the rollout config: this host follows catch-all group %q and is rolled out with it; "+
			"if %q is a typo: agentd run --group G, or add it: fleetctl config add-group --group %s", group, p.Status.Follows, group, group), false
	}
	if p != nil && (p.SpecRev == 0 || p.StatusRev != 0) {
		return "", false // no plan to tell by, or the group has its status
	}
	urls := a.findURLs()
	if len(urls) > 0 && a.id != "" {
		ctx, cancel := context.WithTimeout(ctx, groupCheckTimeout)
		client := &httpfind.Client{URLs: urls, HTTP: &http.Client{Timeout: groupCheckTimeout}}
		_, err := client.Find(ctx, a.id, group)
		cancel()
		var se *httpfind.StatusError
		switch {
		case err == nil:
			return "", false // the controllers know the group: its status is on its way
		case errors.Is(err, httpfind.ErrUnknownGroup) && errors.As(err, &se):
			return unknownGroup(group, se.Groups), true
		}
		// Unreachable: the plan may tell.
	}
	if p != nil {
		return fmt.Sprintf("group %q has no status in the plan although a plan is set: the rollout config does not name it "+
			"(a typo in --group? 'fleetctl config show' lists the groups), or no controller has run since it was added; "+
			"this host is not updated until it does (fix: agentd run --group G, or fleetctl config add-group --group %s)", group, group), false
	}
	return "", false
}

// unknownGroup is the problem of a group the config does not name, given
// the config's groups (from a controller: only valid group names are
// repeated).
func unknownGroup(group string, known []string) string {
	known = slices.DeleteFunc(slices.Clone(known), func(g string) bool { return rollout.ValidateGroupName(g) != nil })
	var b strings.Builder
	fmt.Fprintf(&b, "group %q is not in the rollout config (the controllers say so), so this host is never updated", group)
	if near, ok := rollout.ClosestGroupName(group, known); ok {
		fmt.Fprintf(&b, "; did you mean %q?", near)
	}
	if len(known) > 0 {
		fmt.Fprintf(&b, "; the config's groups: %s", strings.Join(known, ", "))
	}
	fmt.Fprintf(&b, "; fix: agentd run --group G (or agentd enable --group G), or add it: fleetctl config add-group --group %s", group)
	return b.String()
}

// noteGroup logs the group's problem when it changes (agentd run, after
// each full read of the plan).
func (a *Agent) noteGroup(ctx context.Context, p Plan) {
	problem, confirmed := a.groupProblem(ctx, &p)
	if ctx.Err() != nil {
		return
	}
	a.mu.Lock()
	prev := a.groupNote
	a.groupNote = problem
	a.mu.Unlock()
	switch {
	case problem == prev:
	case problem == "":
		a.o.Log.Info("this host's group is in the rollout now", slog.String("group", a.Group()))
	case confirmed:
		a.o.Log.Error("unknown group: "+problem, slog.String("group", a.Group()))
	case p.Status.Follows != "":
		a.o.Log.Warn("group not in the config: "+problem, slog.String("group", a.Group()), slog.String("follows", p.Status.Follows))
	default:
		a.o.Log.Warn("group not in the plan: "+problem, slog.String("group", a.Group()))
	}
}
