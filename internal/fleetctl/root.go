// Package fleetctl is the operator CLI: one Options struct and one runX
// function per command, so tests call commands directly with buffers.
package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/internal/version"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// Global holds the flags every command shares and the process's outside world.
type Global struct {
	NATSURL string
	Creds   string
	TLS     natsutil.TLS
	Timeout time.Duration
	// Actor and Reason go into the audit record of every write: who
	// (default: the creds' user name, else $USER@hostname) and why.
	Actor  string
	Reason string
	// App is --app: the app a plan or status command is about ("": the
	// only app; resolveApp).
	App string

	Out    io.Writer
	ErrOut io.Writer
	Now    func() time.Time

	// conn is the connection the command's fleet was opened on.
	conn *nats.Conn
	// connExtra are options added to the connection (watch: its own
	// disconnect and reconnect handlers).
	connExtra []nats.Option

	// beforeWrite, when set, runs between a command's read and its
	// compare-and-swap write. Tests use it to write the same key under the
	// command and prove that the command then fails instead of losing the
	// other edit.
	beforeWrite func()

	// auditErr is the first write not recorded in the audit trail.
	auditErr error
	// appName is the app resolveApp resolved: the audit records of
	// writes to fleet_plan name it.
	appName string
}

// NewCommand is fleetctl's root command.
func NewCommand() *cobra.Command {
	g := &Global{Now: time.Now}
	root := &cobra.Command{
		Use:   "fleetctl",
		Short: "Operate a fleetwave fleet: status, agents, rollouts",
		Long: `fleetctl reads and changes the fleet's state on the NATS JetStream bus the
controller uses. Read commands print a table for people, write commands a few
lines of text; -o json prints JSON for scripts (one object per write:
docs/cli.md).
` + cliutil.ExitCodesHelp,
		Version: version.Version,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			// Printers escape what they take from peers (escape.Text);
			// these writers are the last wall: no control character,
			// DEL, C1 or bidirectional control reaches the terminal
			// raw, whichever printer forgot.
			g.Out, g.ErrOut = escape.NewWriter(cmd.OutOrStdout()), escape.NewWriter(cmd.ErrOrStderr())
		},
		// A write made but not recorded in the audit trail: its output
		// is printed, the failure was said on stderr, and the exit
		// status says it once more.
		PersistentPostRunE: func(*cobra.Command, []string) error { return g.auditErr },
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.NATSURL, "nats", cliutil.Env("nats://127.0.0.1:4222", "NATS_URL"), "NATS server URL(s) (env NATS_URL)")
	pf.StringVar(&g.Creds, "creds", cliutil.Env("", "NATS_CREDS"), "NATS user credentials file (env NATS_CREDS)")
	g.TLS.Register(pf)
	pf.DurationVar(&g.Timeout, "timeout", 10*time.Second, "give up on the bus after this long")
	pf.StringVar(&g.Actor, "actor", cliutil.Env("", "FLEETCTL_ACTOR"), "who makes the change, in the audit trail (env FLEETCTL_ACTOR; default: the creds' user name, else $USER@hostname)")
	pf.StringVar(&g.Reason, "reason", "", "why: in the audit trail of every write, and in a group action's status and event")
	root.AddCommand(
		newStatusCmd(g), newWatchCmd(g), newAgentsCmd(g),
		newConfigCmd(g), newPlanCmd(g), newPauseCmd(g), newResumeCmd(g),
		newRunCmd(g), newRollbackCmd(g), newMarkDoneCmd(g), newResetCmd(g), newRetryCmd(g),
		newHistoryCmd(g), newAuthCmd(g), newEdgeCmd(g), newBusCmd(g),
		newQuarantineCmd(g),
		newApproveCmd(g),
		newAppsCmd(g),
	)
	root.AddCommand(newRepoCmd(g)) // the release repository: files and keys, no bus
	registerCompletions(root, g)
	return root
}

// fleet connects and binds the stream and buckets. close must be called.
func (g *Global) fleet(ctx context.Context) (f *kv.Fleet, closeFn func(), err error) {
	nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{
		URL: g.NATSURL, Name: "fleetctl", Creds: g.Creds, TLS: g.TLS,
		Log: g.connLog(), Extra: g.connExtra,
	})
	if err != nil {
		return nil, nil, err
	}
	f, err = kv.Open(ctx, js)
	if err != nil {
		// A denied request only times out; the reason reaches the
		// connection. Say it instead of suggesting a missing controller.
		if denied := nc.LastError(); errors.Is(denied, nats.ErrPermissionViolation) {
			err = fmt.Errorf("the server refuses %s access to the fleet's stream and buckets (%w): fleetctl needs admin credentials (--creds, NATS_CREDS; docs/security.md)", g.credsName(), denied)
		}
		nc.Close()
		return nil, nil, err
	}
	g.conn = nc
	return f, nc.Close, nil
}

// refused rewords a failed request when the server refused it: a denied
// request only times out, and the reason reaches the connection.
func (g *Global) refused(what string, err error) error {
	if err == nil || g.conn == nil {
		return err
	}
	if denied := g.conn.LastError(); errors.Is(denied, nats.ErrPermissionViolation) {
		return &rewordedError{msg: fmt.Sprintf("%s: the server refuses %s (%v): it needs admin credentials (--creds, NATS_CREDS; docs/security.md)", what, g.credsName(), denied), err: err}
	}
	return err
}

// credsName names the credentials a refusal is about.
func (g *Global) credsName() string {
	if g.Creds == "" {
		return "a connection without credentials"
	}
	return "the credentials in " + g.Creds
}

// open connects like fleet, bounding only the connecting by the timeout: for
// commands that run until interrupted (watch, status --wait).
func (g *Global) open(ctx context.Context) (f *kv.Fleet, closeFn func(), err error) {
	ctx, cancel := g.withTimeout(ctx)
	defer cancel()
	return g.fleet(ctx)
}

// session opens the fleet for one command, with the command's work on the
// bus bounded by --timeout; done closes the connection and the deadline.
func (g *Global) session(ctx context.Context) (context.Context, *kv.Fleet, func(), error) {
	ctx, cancel := g.withTimeout(ctx)
	f, closeFn, err := g.fleet(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, f, func() { closeFn(); cancel() }, nil
}

// connLog is the NATS connection's logger: errors only, to ErrOut.
func (g *Global) connLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(g.ErrOut, &slog.HandlerOptions{Level: slog.LevelError}))
}

// withTimeout bounds one command's work on the bus.
func (g *Global) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.Timeout)
}
