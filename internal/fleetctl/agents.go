package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// AgentsOptions are the flags of "fleetctl agents ls".
type AgentsOptions struct {
	*Global
	Group   string
	Version string
	Output  string
	// Interval is the agents' heartbeat interval: an agent silent for
	// more than three is unreachable (rollout.Unreachable).
	Interval time.Duration
	// Site keeps only agents whose heartbeat names this site.
	Site string
	// ID shows that one agent in full (why it failed, its app's last
	// lines) instead of the table.
	ID string
}

// AgentRow is one agent in "agents ls -o json": its last heartbeat plus when
// the stream stored it.
type AgentRow struct {
	heartbeat.Heartbeat
	LastSeen time.Time `json:"last_seen"`
	// Class is what the agent is doing in one word (view.AgentClass): ok,
	// updating, blocked, failed, rolled_back, or unreachable (silent for
	// more than three heartbeat intervals).
	Class string `json:"class"`
}

// AgentsReport is the JSON of "fleetctl agents ls -o json".
type AgentsReport struct {
	Agents []AgentRow `json:"agents"`
	// Invalid counts heartbeats in the stream that failed validation or are
	// foreign (a JetStream response stored on a heartbeat subject).
	Invalid int `json:"invalid"`
	// Problems names each of them (key FLEET_HB/<subject>); absent when
	// there are none.
	Problems []Problem `json:"problems,omitempty"`
	// UnknownGroups are the groups of listed agents that the config does
	// not name, with how many agents each: no rollout ever updates them
	// (agentd says so on its host); absent when there are none.
	UnknownGroups map[string]int `json:"unknown_groups,omitempty"`
	// Follows maps each of UnknownGroups whose hosts the catch-all group
	// rolls out to that group (its status is the catch-all's copy:
	// docs/rollout.md, "Catch-all group"); absent when none is.
	Follows map[string]string `json:"follows,omitempty"`
}

func newAgentsCmd(g *Global) *cobra.Command {
	agents := &cobra.Command{
		Use:   "agents",
		Short: "Inspect the agents the bus knows",
	}
	o := &AgentsOptions{Global: g}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List agents from their last heartbeat in the stream",
		Long: `List every agent whose last heartbeat is still in the FLEET_HB stream, read
straight from the stream (no controller involved), sorted by group and id.
Agents silent for longer than the agent expiry are gone from the stream.

STATE is "updating → V (12s)" while the agent installs V (downloading, or
waiting for V to prove healthy; the time is since the install started),
"rolled back from V" after an automatic rollback, "blocked: CAUSE" when its
last attempt hit an infrastructure failure it retries by itself (release
site down, disk full), "error" when its last update attempt failed, else
"ok"; "unreachable" when it has been silent for more than three heartbeat
intervals (--heartbeat-interval, the agents' and controller's; the rollout
counts it neither in flight nor failed until it is heard again). SITE,
shown when any agent names one, is the site its heartbeat carries (agentd
--site, or the JetStream domain of the NATS server it connects to).
REASON, shown when any agent listed reports an error, is why its last
update failed, in its own words (cut to fit; -o json has it whole as
"error").

--id ID shows one agent in full: its state, why it failed, and the last
lines its app printed at the failure (its stdout and stderr, or its
unit's journal, up to 10 lines; "error_output" in -o json).`,
		Example: `  fleetctl agents ls
  fleetctl agents ls --group staging --version 1.4.2
  fleetctl agents ls --app db
  fleetctl agents ls --site edge-berlin
  fleetctl agents ls --id 1b4e28ba-2fa1-4d2e-883f-0016d3cca427
  fleetctl agents ls -o json | jq -r '.agents[] | select(.rollback) | .hostname'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			if err := checkGroupFilter(o.Group); err != nil {
				return err
			}
			if o.Interval <= 0 {
				return cliutil.Usagef("--heartbeat-interval %v: must be positive", o.Interval)
			}
			if o.Version != "" && o.Version != rollout.NoVersion {
				if err := rollout.ValidateVersion(o.Version); err != nil {
					return cliutil.Usagef("--version: %v", err)
				}
			}
			if o.Site != "" {
				if err := rollout.ValidateSite(o.Site); err != nil {
					return cliutil.Usagef("--site: %v", err)
				}
			}
			if o.ID != "" {
				if _, err := rollout.ParseAgentID(o.ID); err != nil {
					return cliutil.Usagef("--id: %v", err)
				}
			}
			return RunAgentsList(cmd.Context(), o)
		},
	}
	ls.Flags().StringVar(&o.Group, "group", "", "only agents of this group")
	ls.Flags().StringVar(&o.Version, "version", "", `only agents running this version ("none": nothing installed)`)
	ls.Flags().StringVar(&o.Site, "site", "", "only agents whose heartbeat names this site")
	ls.Flags().StringVar(&o.ID, "id", "", "show this agent in full: why it failed and its app's last lines")
	ls.Flags().DurationVar(&o.Interval, "heartbeat-interval", 30*time.Second, "the agents' heartbeat interval (the controller's --heartbeat-interval): silent for more than three is unreachable")
	outputFlag(ls, &o.Output)
	appFlag(ls, g)
	agents.AddCommand(ls)
	return agents
}

// RunAgentsList is "fleetctl agents ls".
func RunAgentsList(ctx context.Context, o *AgentsOptions) error {
	ctx, f, done, err := o.appSession(ctx)
	if err != nil {
		return err
	}
	defer done()
	stored, err := f.LastHeartbeats(ctx, o.Group)
	if err != nil {
		return err
	}
	rep := AgentsReport{Agents: []AgentRow{}}
	sites := map[string]bool{} // of the agents --site left out
	for _, s := range newestPerAgent(stored) {
		hb, err := s.Decode()
		var p *kv.Problem
		if errors.As(err, &p) {
			rep.Invalid++
			rep.Problems = append(rep.Problems, problemOf(p))
			continue
		}
		if err != nil {
			return err
		}
		if o.ID != "" && string(hb.AgentID) != o.ID {
			continue
		}
		if o.Version != "" && hb.Version() != o.Version || o.Site != "" && hb.Site != o.Site {
			if hb.Site != "" {
				sites[hb.Site] = true
			}
			continue
		}
		rep.Agents = append(rep.Agents, AgentRow{Heartbeat: *hb, LastSeen: s.Stored, Class: view.AgentClass(hb, s.Stored, o.Now(), o.Interval)})
	}
	// The stream yields subjects in storage order; sort for people and diffs.
	sortAgents(rep.Agents)
	sort.Slice(rep.Problems, func(i, j int) bool { return rep.Problems[i].Key < rep.Problems[j].Key })
	warnProblems(o.ErrOut, rep.Problems)
	cfg, isDefault, cfgErr := f.ReadConfig(ctx)
	if len(rep.Agents) == 0 && o.Group != "" {
		// No agents of a group the config lacks: most likely a typo.
		if cfgErr == nil && !inConfig(o.Group, cfg.Value) {
			fmt.Fprintf(o.ErrOut, "note: %s\n", notInConfig(o.Group, cfg.Value, isDefault))
		}
	}
	if cfgErr == nil {
		rep.UnknownGroups = unknownGroups(rep.Agents, cfg.Value)
		if len(rep.UnknownGroups) > 0 {
			// Which of them the catch-all follows: one batched read of
			// the plan, only when a listed agent is in such a group.
			if st, err := f.ReadState(ctx); err == nil {
				for g := range rep.UnknownGroups {
					if e, ok := st.Groups[g]; ok && e.Value.Follows != "" {
						if rep.Follows == nil {
							rep.Follows = map[string]string{}
						}
						rep.Follows[g] = e.Value.Follows
					}
				}
			}
		}
		if o.Output != "json" { // there, unknown_groups says it
			warnUnknownGroups(o.ErrOut, rep.UnknownGroups, rep.Follows, cfg.Value)
		}
	}
	if len(rep.Agents) == 0 && o.Site != "" {
		names := make([]string, 0, len(sites))
		for n := range sites {
			names = append(names, n)
		}
		sort.Strings(names)
		if len(names) == 0 {
			fmt.Fprintf(o.ErrOut, "note: no agent matching the other filters names a site\n")
		} else {
			fmt.Fprintf(o.ErrOut, "note: no agent names site %q; the sites are: %s\n", o.Site, escape.Text(strings.Join(names, ", ")))
		}
	}
	if o.ID != "" && len(rep.Agents) == 0 {
		return fmt.Errorf("agent %s: no heartbeat of it%s in the stream%s (silent for longer than the agent expiry, or never heard)",
			o.ID, f.appNote(), filtersNote(o))
	}
	if o.Output == "json" {
		return writeJSON(o.Out, rep)
	}
	if len(rep.Agents) == 0 {
		_, err := fmt.Fprintln(o.Out, "No agents.")
		return err
	}
	if o.ID != "" {
		return writeAgentDetail(o.Out, rep.Agents[0], o.Now())
	}
	if sited(rep.Agents) {
		return writeAgentsWithSites(o, rep)
	}
	reasons, labeled := anyReason(rep.Agents), anyLabels(rep.Agents)
	tw := newTable(o.Out)
	fmt.Fprint(tw, "AGENT ID\tGROUP\tHOSTNAME\tVERSION\tSTATE\tSEEN")
	fmt.Fprintln(tw, labelsHeader(labeled)+reasonHeader(reasons))
	now := o.Now()
	for _, a := range rep.Agents {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago", cell(string(a.AgentID), 36), cell(a.Group, 16), cell(a.Hostname, 20),
			cell(a.Version(), 40), cell(a.stateCell(now), 60), age(now, a.LastSeen))
		fmt.Fprintln(tw, a.labelsCell(labeled)+a.reasonCell(reasons))
	}
	return tw.Flush()
}

// reasonWidth is the REASON column's width: the table stays readable on
// a wide terminal; agents ls --id and -o json have the whole text.
const reasonWidth = 70

// anyReason reports whether any of rows has a reason to show (REASON).
func anyReason(rows []AgentRow) bool {
	for i := range rows {
		if view.AgentReason(&rows[i].Heartbeat) != "" {
			return true
		}
	}
	return false
}

// reasonHeader is the REASON column's header, when shown.
func reasonHeader(shown bool) string {
	if !shown {
		return ""
	}
	return "\tREASON"
}

// reasonCell is a's REASON cell, when the column is shown: why its last
// update failed, on one line ("-": it reports no error).
func (a *AgentRow) reasonCell(shown bool) string {
	if !shown {
		return ""
	}
	r := view.AgentReason(&a.Heartbeat)
	if r == "" {
		r = "-"
	}
	return "\t" + cell(r, reasonWidth)
}

// startVersionOrNone is the version the agent's last update began on
// ("none": nothing was installed).
func (a *AgentRow) startVersionOrNone() string {
	if a.StartVersion == "" {
		return rollout.NoVersion
	}
	return a.StartVersion
}

// filtersNote says which other filters --id was combined with, if any.
func filtersNote(o *AgentsOptions) string {
	var f []string
	if o.Group != "" {
		f = append(f, "--group "+o.Group)
	}
	if o.Version != "" {
		f = append(f, "--version "+o.Version)
	}
	if o.Site != "" {
		f = append(f, "--site "+o.Site)
	}
	if len(f) == 0 {
		return ""
	}
	return " matching " + strings.Join(f, " ")
}

// writeAgentDetail shows one agent in full: who and where, what it runs,
// its state, why its last update failed and the last lines its app
// printed then. Every value is the agent's own text: escaped, the
// output line by line.
func writeAgentDetail(w io.Writer, a AgentRow, now time.Time) error {
	site := a.Site
	if site == "" {
		site = "-"
	}
	fields := [][2]string{
		{"Agent", string(a.AgentID)},
		{"Hostname", a.Hostname},
		{"Group", a.Group},
		{"Site", site},
		{"Labels", orDash(labelsText(a.Labels.Map()))},
		{"Version", a.Version()},
		{"State", a.stateCell(now)},
		{"Seen", age(now, a.LastSeen) + " ago (" + a.LastSeen.UTC().Format(time.RFC3339) + ")"},
	}
	if !a.StartTime.IsZero() {
		fields = append(fields, [2]string{"Last update", "began " + a.StartTime.UTC().Format(time.RFC3339) + " on " + a.startVersionOrNone()})
	}
	if a.Error != "" {
		fields = append(fields, [2]string{"Error", a.Error})
		if a.ErrorClass != "" {
			cause := a.ErrorClass
			if a.ErrorCause != "" {
				cause += ": " + a.ErrorCause
			}
			fields = append(fields, [2]string{"Class", cause})
		}
	}
	for _, f := range fields {
		if _, err := fmt.Fprintf(w, "%-12s %s\n", f[0]+":", escape.Text(f[1])); err != nil {
			return err
		}
	}
	switch {
	case a.ErrorOutput != "":
		fmt.Fprintln(w, "Output:      the app's last lines at the failure:")
		for _, l := range strings.Split(a.ErrorOutput, "\n") {
			fmt.Fprintln(w, "  | "+escape.Text(l))
		}
	case a.Error != "":
		fmt.Fprintln(w, "Output:      none reported (the app printed nothing, or the failure came before it ran)")
	}
	return nil
}

// stateCell is the STATE column: view.AgentState, marked unreachable
// with what the agent last said when it is.
func (a *AgentRow) stateCell(now time.Time) string {
	state := view.AgentState(&a.Heartbeat, now)
	if a.Class == view.AgentUnreachable {
		state = "unreachable (last: " + state + ")"
	}
	return state
}

func sortAgents(rows []AgentRow) {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Group != rows[j].Group {
			return rows[i].Group < rows[j].Group
		}
		return rows[i].AgentID < rows[j].AgentID
	})
}

// sited reports whether any of rows names a site.
func sited(rows []AgentRow) bool {
	for _, a := range rows {
		if a.Site != "" {
			return true
		}
	}
	return false
}

// writeAgentsWithSites is the agents table with a SITE column ("-": the
// agent names none).
func writeAgentsWithSites(o *AgentsOptions, rep AgentsReport) error {
	tw := newTable(o.Out)
	reasons, labeled := anyReason(rep.Agents), anyLabels(rep.Agents)
	fmt.Fprint(tw, "AGENT ID\tGROUP\tSITE\tHOSTNAME\tVERSION\tSTATE\tSEEN")
	fmt.Fprintln(tw, labelsHeader(labeled)+reasonHeader(reasons))
	now := o.Now()
	for _, a := range rep.Agents {
		site := a.Site
		if site == "" {
			site = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s ago", cell(string(a.AgentID), 36), cell(a.Group, 16), cell(site, 16), cell(a.Hostname, 20),
			cell(a.Version(), 40), cell(a.stateCell(now), 60), age(now, a.LastSeen))
		fmt.Fprintln(tw, a.labelsCell(labeled)+a.reasonCell(reasons))
	}
	return tw.Flush()
}

// labelsWidth is the LABELS column's width; agents ls --id and -o json
// have every label.
const labelsWidth = 48

// anyLabels reports whether any of rows has labels (LABELS).
func anyLabels(rows []AgentRow) bool {
	for i := range rows {
		if !rows[i].Labels.IsZero() {
			return true
		}
	}
	return false
}

// labelsHeader is the LABELS column's header, when shown.
func labelsHeader(shown bool) string {
	if !shown {
		return ""
	}
	return "\tLABELS"
}

// labelsCell is a's LABELS cell, when the column is shown ("-": none).
func (a *AgentRow) labelsCell(shown bool) string {
	if !shown {
		return ""
	}
	l := labelsText(a.Labels.Map())
	if l == "" {
		l = "-"
	}
	return "\t" + cell(l, labelsWidth)
}

// labelsText is labels as k=v,k=v: the host's own first (what selectors
// usually name), then agentd's automatic os, arch and kernel. Each label
// is the host's text: the printer escapes it.
func labelsText(l rollout.Labels) string {
	var own, auto []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		if slices.Contains(rollout.AutoLabels, k) {
			continue
		}
		own = append(own, k+"="+l[k])
	}
	for _, k := range rollout.AutoLabels {
		if v, ok := l[k]; ok {
			auto = append(auto, k+"="+v)
		}
	}
	return strings.Join(append(own, auto...), ",")
}

// unknownGroups counts the agents of rows by group, for the groups cfg does
// not name (nil: none).
func unknownGroups(rows []AgentRow, cfg rollout.Config) map[string]int {
	var out map[string]int
	for i := range rows {
		if g := rows[i].Group; !inConfig(g, cfg) {
			if out == nil {
				out = map[string]int{}
			}
			out[g]++
		}
	}
	return out
}

// warnUnknownGroups says, on stderr, which listed agents are in a group the
// config does not name: they look "ok" in the table, and no rollout will
// ever update them.
func warnUnknownGroups(w io.Writer, unknown map[string]int, follows map[string]string, cfg rollout.Config) {
	if len(unknown) == 0 {
		return
	}
	names := make([]string, 0, len(cfg.Groups))
	for _, g := range cfg.Groups {
		names = append(names, g.Name)
	}
	groups := make([]string, 0, len(unknown))
	for g := range unknown {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		if ca := follows[g]; ca != "" {
			fmt.Fprintf(w, "note: %d agent(s) in group %q, which the config does not name, follow catch-all group %q (rolled out with it)\n",
				unknown[g], escape.Text(g), escape.Text(ca))
			continue
		}
		hint := ""
		if near, ok := rollout.ClosestGroupName(g, names); ok {
			hint = fmt.Sprintf(" (did you mean %q?)", near)
		}
		if ca, ok := cfg.CatchAllGroup(); ok {
			// No copy of the catch-all's status under the group yet:
			// the leader writes it at its next pass (unless it already
			// follows rollout.MaxCaughtGroups groups).
			fmt.Fprintf(w, "warning: %d agent(s) in group %q, which the config does not name%s: not followed yet by catch-all group %q (the controller's next pass writes its status for them); if the group is a typo, fix the host (agentd run --group G), or add the group (fleetctl config add-group --group %s)\n",
				unknown[g], escape.Text(g), hint, escape.Text(ca), escape.Text(g))
			continue
		}
		fmt.Fprintf(w, "warning: %d agent(s) in group %q, which the config does not name%s: no rollout updates them; fix the host (agentd run --group G) or add the group (fleetctl config add-group --group %s)\n",
			unknown[g], escape.Text(g), hint, escape.Text(g))
	}
}

// orDash is s, or "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// newestPerAgent is stored with only the newest heartbeat of each agent
// (by stream sequence), in stored's order: an agent that moved to another
// group (its labels, agentd enable --group) leaves its old group's last
// heartbeat in the stream until it expires. A message whose subject names
// no agent, or that is foreign, is kept, for Decode to report.
func newestPerAgent(stored []kv.StoredHeartbeat) []kv.StoredHeartbeat {
	newest := map[rollout.AgentID]uint64{}
	for _, s := range stored {
		if _, _, id, err := heartbeat.ParseAppSubject(s.Subject); err == nil && !s.Foreign && s.Sequence > newest[id] {
			newest[id] = s.Sequence
		}
	}
	out := stored[:0:0]
	for _, s := range stored {
		if _, _, id, err := heartbeat.ParseAppSubject(s.Subject); err == nil && !s.Foreign && s.Sequence < newest[id] {
			continue
		}
		out = append(out, s)
	}
	return out
}
