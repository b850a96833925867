// Package cliutil is what the three binaries' command lines share: exit
// codes, signal handling, logging flags and environment fallbacks.
package cliutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/escape"
)

// Exit codes, the same for every binary and listed in every --help.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
	ExitHalted  = 3
	// ExitDoneWithFailures: the rollout is done, but agents of a done
	// group failed the target (rolled back from it): not the clean
	// success a pipeline may take 0 for.
	ExitDoneWithFailures = 4
)

// ExitCodesHelp is appended to every root command's long help.
const ExitCodesHelp = `
Exit codes:
  0  success
  1  failure (the error is printed on stderr)
  2  usage error (bad flag, argument or value)
  3  rollout halted or failed (commands that wait on a rollout)
  4  rollout done, with failed agents (commands that wait on a rollout)`

// UsageError marks an error as the user's invocation being wrong.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// ExitError carries a specific exit code.
type ExitError struct {
	Code int
	Err  error
}

func (e ExitError) Error() string { return e.Err.Error() }
func (e ExitError) Unwrap() error { return e.Err }

// ExitCode maps an error to the process exit code.
func ExitCode(err error) int {
	var ue UsageError
	var ee ExitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.Code
	case errors.As(err, &ue):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// Main runs root with a context that is cancelled on SIGINT or SIGTERM,
// prints any error on stderr and returns the exit code.
func Main(root *cobra.Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	Prepare(root)
	err := root.ExecuteContext(ctx)
	if err != nil {
		// An error may quote what a peer sent (a server's refusal, a
		// stored value): its lines are printed, its controls escaped.
		fmt.Fprintf(root.ErrOrStderr(), "%s: %s\n", root.Name(), escape.Lines(err.Error()))
		// Only a usage mistake points at --help: a refusal that exits 2
		// (an ExitError) already names its fix.
		if ue := (UsageError{}); ExitCode(err) == ExitUsage && errors.As(err, &ue) {
			fmt.Fprintf(root.ErrOrStderr(), "Run '%s --help' for usage.\n", root.CommandPath())
		}
	}
	return ExitCode(err)
}

// Prepare makes cobra's own usage failures (bad flags, unknown commands,
// wrong argument counts) UsageErrors and silences cobra's printing, so errors
// are printed once, by Main.
func Prepare(root *cobra.Command) {
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// "fleetctl config aply -f x": cobra stops at "config", whose
		// own flags do not know -f. The word before the flag is the
		// mistake: say it is not a command, not that -f is unknown.
		if c.HasSubCommands() {
			if a := c.Flags().Args(); len(a) > 0 && !isSubcommand(c, a[0]) {
				return unknownCommand(c, a[0])
			}
		}
		return UsageError{err}
	})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return UsageError{err}
				}
				return nil
			}
		}
		if c.HasSubCommands() && c.RunE == nil && c.Run == nil {
			c.RunE = func(cmd *cobra.Command, a []string) error {
				if len(a) > 0 {
					return unknownCommand(cmd, a[0])
				}
				return Usagef("%s needs a subcommand: %s", cmd.CommandPath(), subcommandNames(cmd))
			}
			c.Args = cobra.ArbitraryArgs
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// unknownCommand is the usage error for a word that is not one of c's
// subcommands, with the closest names (cobra's suggestions: edit distance
// and prefixes) or else the list.
func unknownCommand(c *cobra.Command, word string) error {
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's own default
	}
	if s := c.SuggestionsFor(word); len(s) > 0 {
		return Usagef("unknown command %q for %q; did you mean %q?", word, c.CommandPath(), strings.Join(s, `" or "`))
	}
	return Usagef("unknown command %q for %q; its commands are: %s", word, c.CommandPath(), subcommandNames(c))
}

// isSubcommand reports whether word names one of c's subcommands or their
// aliases.
func isSubcommand(c *cobra.Command, word string) bool {
	for _, s := range c.Commands() {
		if s.Name() == word || s.HasAlias(word) {
			return true
		}
	}
	return false
}

func subcommandNames(c *cobra.Command) string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return strings.Join(names, ", ")
}

// Env returns the value of the first set environment variable, or def.
func Env(def string, names ...string) string {
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok && v != "" {
			return v
		}
	}
	return def
}

// LogFlags are the logging flags of the daemons.
type LogFlags struct {
	Level  string
	Format string
}

// Register adds --log-level and --log-format to cmd.
func (l *LogFlags) Register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&l.Level, "log-level", "info", "log level: debug, info, warn or error")
	cmd.PersistentFlags().StringVar(&l.Format, "log-format", "text", "log format: text or json")
}

// Logger builds the logger the flags describe, writing to w.
func (l *LogFlags) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return nil, Usagef("--log-level %q: want debug, info, warn or error", l.Level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch l.Format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		// slog's JSON leaves DEL, C1 and bidirectional controls raw (its
		// text handler quotes them): a log line may carry what a peer
		// sent, and is read on terminals too.
		return slog.New(slog.NewJSONHandler(escape.NewJSONWriter(w), opts)), nil
	default:
		return nil, Usagef("--log-format %q: want text or json", l.Format)
	}
}
