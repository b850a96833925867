package agentd

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/version"
)

// NewCommand is agentd's root command.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:     "agentd",
		Short:   "fleetwave agent: keeps this host on the version its rollout group should run",
		Long:    "agentd runs on every host. It owns the host's install tree and update.yaml under --root\nand reports the host's status to the controllers as heartbeats over NATS JetStream.\n" + cliutil.ExitCodesHelp,
		Version: version.Version,
	}
	root.AddCommand(newRunCmd())
	return root
}

func newRunCmd() *cobra.Command {
	o := Options{}
	var logFlags cliutil.LogFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent daemon",
		Long: `Run the agent until SIGINT or SIGTERM.

On first start it draws the host's agent id (kept in <root>/agent_id) and
writes <root>/update.yaml; --group and --nats are saved there, so later starts
need only --root. It heartbeats every --heartbeat-interval (± jitter) and at
once after any change, and reconnects forever when the bus goes away.`,
		Example: `  agentd run --nats nats://controller.example:4222 --group staging
  agentd run --root /tmp/agent1 --nats nats://127.0.0.1:4222 --group canary --heartbeat-interval 5s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logFlags.Logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if o.Interval <= 0 || o.Jitter < 0 || o.Jitter >= o.Interval {
				return cliutil.Usagef("--heartbeat-interval must be positive and --heartbeat-jitter in [0, interval)")
			}
			o.Log = log
			a, err := New(o)
			if err != nil {
				return err
			}
			err = a.Run(cmd.Context())
			if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
				log.Info("agent stopping")
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Root, "root", DefaultRoot, "state directory (agent_id, update.yaml, versions/)")
	f.StringVar(&o.NATSURL, "nats", cliutil.Env("", "NATS_URL"), "NATS server URL(s); saved default is update.yaml spec.nats (env NATS_URL)")
	f.StringVar(&o.Creds, "creds", cliutil.Env("", "NATS_CREDS"), "NATS user credentials file (env NATS_CREDS)")
	f.StringVar(&o.Group, "group", "", "rollout group of this host (saved in update.yaml)")
	f.StringVar(&o.Hostname, "hostname", "", "host name to report (default: the system's)")
	f.DurationVar(&o.Interval, "heartbeat-interval", DefaultInterval, "time between heartbeats; must match the controller's --heartbeat-interval")
	f.DurationVar(&o.Jitter, "heartbeat-jitter", DefaultJitter, "random spread (±) around the heartbeat interval")
	logFlags.Register(cmd)
	return cmd
}
