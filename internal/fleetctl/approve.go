package fleetctl

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// ApproveOptions are the flags of "fleetctl approve". The reason is the
// global --reason, required here.
type ApproveOptions struct {
	GroupActionOptions
	// Stage is --stage: start or after_canary; "" approves whichever stage
	// the group awaits.
	Stage string
}

func newApproveCmd(g *Global) *cobra.Command {
	o := &ApproveOptions{GroupActionOptions: GroupActionOptions{Global: g}}
	cmd := &cobra.Command{
		Use:   "approve --group G --reason TEXT [--stage start|after_canary]",
		Short: "Approve a group that awaits an operator's approval",
		Long: `Approve a group whose config asks for an approval (approval: start and/or
after_canary, docs/rollout.md "Approvals") and that is waiting for it now:
"fleetctl status" shows it as awaiting approval. The approval is written into
the group's status (compare-and-swap on its revision) with who approved
(--actor, else the credentials' user name), when and why; the controller's
next step moves the group on (starts it, or makes it active) and names the
approver in the transition. The audit trail ("fleetctl history") records it.

--reason is required (exit 2 without it). --stage says which stage you mean
to approve; without it, the stage the group awaits. Refused, writing nothing
(exit 1), when the group is not awaiting an approval, awaits another stage
than --stage says, is halted, or its awaited stage is already approved. An approval is for one
stage of one target: a new target or a reset asks again.`,
		Example: `  fleetctl approve --group prod --reason "staging soaked a day, CHG-1234"
  fleetctl approve --group prod --stage after_canary --reason "canary dashboards clean"
  fleetctl --actor alice approve --group prod --reason "on-call sign-off" -o json | jq .revision`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			return RunApprove(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Group, "group", "", "the group to approve")
	cmd.Flags().StringVar(&o.Stage, "stage", "", "the stage approved: start or after_canary (default: the one the group awaits)")
	writeOutputFlag(cmd, &o.Output)
	appFlag(cmd, g)
	_ = cmd.RegisterFlagCompletionFunc("stage", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{string(rollout.ApprovalStart) + "\tbefore the group starts",
			string(rollout.ApprovalAfterCanary) + "\tafter its canaries, before it goes active"}, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// RunApprove is "fleetctl approve".
func RunApprove(ctx context.Context, o *ApproveOptions) error {
	if err := checkGroupFlag(o.Group); err != nil {
		return err
	}
	reason := strings.TrimSpace(o.Reason)
	if reason == "" {
		return cliutil.Usagef("approve --group %s: --reason is required: say why the group may go on (it is recorded with your name); nothing written", o.Group)
	}
	var stage rollout.ApprovalStage
	if o.Stage != "" {
		s, err := rollout.ParseApprovalStage(o.Stage)
		if err != nil {
			return cliutil.Usagef("--stage: %v; nothing written", err)
		}
		stage = s
	}
	by := o.actor()
	action := func(st rollout.GroupStatus, _ string, now time.Time) (rollout.GroupStatus, rollout.Event, error) {
		next, ev, err := rollout.Approve(st, stage, by, reason, now)
		if err != nil {
			return st, ev, fmt.Errorf("%w; nothing written", err) // the group's state, not the invocation: exit 1
		}
		return next, ev, nil
	}
	return runGroupAction(ctx, &o.GroupActionOptions, "approve", action)
}
