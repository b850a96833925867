package fleetctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Every fleetctl write is compare-and-swap on the revision the command read:
// read, change, validate, then save with that revision. There is no retry
// loop on purpose: a retry would re-apply the change on top of someone
// else's edit that the operator never saw. The operator re-reads and decides.

// ConflictError is a write that lost a race: someone wrote the key after
// the command read it, so nothing was written. It wraps kv.ErrConflict.
type ConflictError struct {
	// Key is bucket/key.
	Key string
	// Revision is the revision the command read (0: it found no key).
	Revision uint64
	Err      error
}

func (e *ConflictError) Error() string {
	if e.Revision == 0 {
		return fmt.Sprintf("%s changed under you (someone else created it while this command ran); nothing was written: re-read and retry", e.Key)
	}
	return fmt.Sprintf("%s changed under you (someone else wrote it after revision %d); nothing was written: re-read and retry", e.Key, e.Revision)
}

func (e *ConflictError) Unwrap() error { return e.Err }

// save writes v at key if the key is still at rev (rev 0: if it still does
// not exist), and records the write in the audit trail (ch says what it is).
func save[T any](ctx context.Context, g *Global, f *kv.Fleet, b jetstream.KeyValue, key string, v T, rev uint64, ch change) (uint64, error) {
	if err := g.checkReason(ctx, f, ch); err != nil {
		return 0, err
	}
	if g.beforeWrite != nil {
		g.beforeWrite()
	}
	next, err := kv.Save(ctx, b, key, v, rev)
	if errors.Is(err, kv.ErrConflict) {
		return 0, &ConflictError{Key: b.Bucket() + "/" + key, Revision: rev, Err: err}
	}
	if err != nil {
		return 0, g.refused("write "+b.Bucket()+"/"+key, err)
	}
	g.record(ctx, f, b.Bucket(), key, ch, v, false, next, rev)
	return next, nil
}

// rewordedError keeps the chain of an error whose message fleetctl improves.
type rewordedError struct {
	msg string
	err error
}

func (e *rewordedError) Error() string { return e.msg }
func (e *rewordedError) Unwrap() error { return e.err }

// validateConfig is Config.Validate as a usage error. rollout names the field
// of every violation except a dependency cycle, which is about depends_on.
func validateConfig(c rollout.Config) error {
	err := c.Validate()
	if err == nil {
		return nil
	}
	msg := strings.ReplaceAll(err.Error(), "dependency cycle", "depends_on: dependency cycle")
	return cliutil.UsageError{Err: &rewordedError{msg: msg, err: err}}
}

// stripV accepts the "v1.4.2" people often type for a release called 1.4.2.
func stripV(v string) string {
	v = strings.TrimSpace(v)
	if len(v) > 1 && v[0] == 'v' && v[1] >= '0' && v[1] <= '9' {
		return v[1:]
	}
	return v
}

// groupFields are GroupConfig's JSON fields in the order people read them.
var groupFields = []string{
	"name", "days", "start_hour", "window_length", "wait_hours", "jitter_seconds", "canary_count", "small_group", "max_in_flight",
	"alert_after", "failure_threshold", "health_timeout", "min_healthy_time", "update_timeout",
	"infrastructure_hold", "vanished_limit", "depends_on", "approval", "alert_on_approval_wait",
	"rate", "adaptive_in_flight", "selector",
}

// catchAllText says what a config's catch_all means: omitted is the last
// group, "-" none.
func catchAllText(c rollout.Config) string {
	switch g, ok := c.CatchAllGroup(); {
	case !ok:
		return "- (none)"
	case c.CatchAll == "":
		return "omitted (the last group, " + g + ")"
	default:
		return g
	}
}

// fieldsOf returns v's JSON fields.
func fieldsOf(v any) map[string]json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	return m
}

// show renders a JSON value for a one-line summary: strings without quotes.
func show(raw json.RawMessage) string { return view.ShowJSON(raw) }

// showSet is show of a field that may be absent (omitted when unset, as
// approval is): "none" then.
func showSet(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "none"
	}
	return show(raw)
}

// omittedGroupFields are what group fields left out of the JSON (when at
// their default) mean, for a change's summary; any other omitted field is
// "none".
var omittedGroupFields = map[string]string{
	"window_length":      rollout.DefaultWindowLength.String() + " (default)",
	"small_group":        "0",
	"adaptive_in_flight": "false",
}

// showGroupField is showSet of one group field, saying what an omitted
// one means.
func showGroupField(field string, raw json.RawMessage) string {
	if d, ok := omittedGroupFields[field]; ok && len(raw) == 0 {
		return d
	}
	return showSet(raw)
}

// describeConfigChange lists what next changes in prev, one item per line,
// for the operator to check what was written.
func describeConfigChange(prev, next rollout.Config) []string {
	var out []string
	if prev.Mode != next.Mode {
		out = append(out, fmt.Sprintf("mode %s → %s", prev.Mode, next.Mode))
	}
	if prev.Timezone != next.Timezone {
		out = append(out, fmt.Sprintf("timezone %s → %s", prev.Timezone, next.Timezone))
	}
	if prev.RequireReason != next.RequireReason {
		out = append(out, fmt.Sprintf("require_reason %t → %t", prev.RequireReason, next.RequireReason))
	}
	if prev.QuarantineAfter != next.QuarantineAfter {
		out = append(out, fmt.Sprintf("quarantine_after %d → %d", prev.QuarantineAfter, next.QuarantineAfter))
	}
	if prev.CatchAll != next.CatchAll {
		out = append(out, fmt.Sprintf("catch_all %s → %s", catchAllText(prev), catchAllText(next)))
	}
	a, b := fieldsOf(prev.AnalysisConfig), fieldsOf(next.AnalysisConfig)
	for _, f := range []string{"prometheus_url", "prometheus_bearer_token_file", "prometheus_ca_file", "prometheus_insecure_skip_verify"} {
		if string(a[f]) != string(b[f]) {
			out = append(out, fmt.Sprintf("%s %s → %s", f, showSet(a[f]), showSet(b[f])))
		}
	}
	out = append(out, describeChecks("analysis", prev.Analysis, next.Analysis)...)
	var prevNames, nextNames []string
	for _, g := range prev.Groups {
		prevNames = append(prevNames, g.Name)
		if _, ok := next.Group(g.Name); !ok {
			out = append(out, fmt.Sprintf("group %q removed", g.Name))
		}
	}
	for _, g := range next.Groups {
		nextNames = append(nextNames, g.Name)
		old, ok := prev.Group(g.Name)
		if !ok {
			out = append(out, fmt.Sprintf("group %q added", g.Name))
			continue
		}
		a, b := fieldsOf(old), fieldsOf(g)
		var changes []string
		for _, f := range groupFields {
			if string(a[f]) != string(b[f]) {
				changes = append(changes, fmt.Sprintf("%s %s → %s", f, showGroupField(f, a[f]), showGroupField(f, b[f])))
			}
		}
		if len(changes) > 0 {
			out = append(out, fmt.Sprintf("group %q: %s", g.Name, strings.Join(changes, ", ")))
		}
		out = append(out, describeChecks(fmt.Sprintf("group %q: analysis", g.Name), old.Analysis, g.Analysis)...)
	}
	if reordered(prevNames, nextNames) {
		out = append(out, "group order: "+strings.Join(nextNames, ", "))
	}
	out = append(out, describeApps(prev, next)...)
	if len(out) == 0 {
		// A field this function does not know yet: name it rather than
		// say that nothing changed.
		for _, c := range kv.JSONDiff(marshal(prev), marshal(next)) {
			out = append(out, fmt.Sprintf("%s %s → %s", c.Path, showSet(c.Before), showSet(c.After)))
		}
	}
	return out
}

// checkFields are Check's JSON fields in the order people read them.
var checkFields = []string{"query", "success", "failure", "interval", "count", "inconclusive_limit"}

// describeChecks lists the metric analysis checks added, removed and
// changed (by name) between prev and next, each line starting with what.
func describeChecks(what string, prev, next []rollout.Check) []string {
	var out []string
	byName := func(cs []rollout.Check, name string) (rollout.Check, bool) {
		for _, c := range cs {
			if c.Name == name {
				return c, true
			}
		}
		return rollout.Check{}, false
	}
	for _, c := range prev {
		if _, ok := byName(next, c.Name); !ok {
			out = append(out, fmt.Sprintf("%s check %q removed", what, c.Name))
		}
	}
	for _, c := range next {
		old, ok := byName(prev, c.Name)
		a, b := fieldsOf(old), fieldsOf(c)
		var parts []string
		for _, f := range checkFields {
			switch {
			case !ok && len(b[f]) > 0 && show(b[f]) != "":
				parts = append(parts, fmt.Sprintf("%s %s", f, show(b[f])))
			case ok && string(a[f]) != string(b[f]):
				parts = append(parts, fmt.Sprintf("%s %s → %s", f, showSet(a[f]), showSet(b[f])))
			}
		}
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s check %q added: %s", what, c.Name, strings.Join(parts, ", ")))
		case len(parts) > 0:
			out = append(out, fmt.Sprintf("%s check %q: %s", what, c.Name, strings.Join(parts, ", ")))
		}
	}
	return out
}

// reordered reports whether the names both lists share appear in another order.
func reordered(a, b []string) bool {
	inB := map[string]bool{}
	for _, n := range b {
		inB[n] = true
	}
	inA := map[string]bool{}
	var x, y []string
	for _, n := range a {
		inA[n] = true
		if inB[n] {
			x = append(x, n)
		}
	}
	for _, n := range b {
		if inA[n] {
			y = append(y, n)
		}
	}
	return strings.Join(x, "\x00") != strings.Join(y, "\x00")
}
