package fleetctl

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// completionTimeout bounds a completion's trip to the bus: the shell waits
// for it while the operator presses tab.
const completionTimeout = 2 * time.Second

// versionFlags complete with the plan's versions.
var versionFlags = []string{"target", "start", "version"}

// registerCompletions completes flag values from the fleet on every command
// under c: --group with the configured group names, --target, --start and
// --version with the plan's versions. -o completes where it is registered
// (formatFlag).
func registerCompletions(c *cobra.Command, g *Global) {
	for _, name := range []string{"group"} {
		if c.Flags().Lookup(name) != nil {
			_ = c.RegisterFlagCompletionFunc(name, g.completeGroups)
		}
	}
	if c.Flags().Lookup("app") != nil {
		_ = c.RegisterFlagCompletionFunc("app", g.completeApps)
	}
	for _, name := range versionFlags {
		if c.Flags().Lookup(name) != nil {
			_ = c.RegisterFlagCompletionFunc(name, g.completeVersions)
		}
	}
	for _, sub := range c.Commands() {
		registerCompletions(sub, g)
	}
}

// completeGroups offers the group names of the stored config (or the
// default config's). Silent on any error: a shell shows nothing.
func (g *Global) completeGroups(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	var names []string
	g.completeFrom(cmd.Context(), func(ctx context.Context, f *kv.Fleet) {
		cfg, _, err := f.ReadConfig(ctx)
		if err != nil {
			return
		}
		for _, gr := range cfg.Value.Groups {
			if strings.HasPrefix(gr.Name, prefix) {
				names = append(names, gr.Name)
			}
		}
	})
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completeVersions offers the plan's target and start versions, then the
// app's releases in the release repository's catalog (newest first),
// described.
func (g *Global) completeVersions(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	var out []string
	g.completeFrom(cmd.Context(), func(ctx context.Context, kf *kv.Fleet) {
		f, err := g.resolveApp(ctx, kf)
		if err != nil {
			return
		}
		offered := map[string]bool{}
		if spec, err := f.ReadSpec(ctx); err == nil {
			s := spec.Value
			if strings.HasPrefix(s.TargetVersion, prefix) {
				out, offered[s.TargetVersion] = append(out, s.TargetVersion+"\tthe plan's target"), true
			}
			if s.StartVersion != s.TargetVersion && strings.HasPrefix(s.StartVersion, prefix) {
				out, offered[s.StartVersion] = append(out, s.StartVersion+"\tthe plan's start"), true
			}
		}
		c, ok, err := readCatalog(ctx, kf)
		if err != nil || !ok {
			return
		}
		for _, r := range newestFirst(c.Of(f.NS.Name)) {
			if offered[r.Version] || !strings.HasPrefix(r.Version, prefix) {
				continue
			}
			desc := "released"
			switch {
			case r.EndOfLife:
				desc = "released, end of life"
			case r.Security:
				desc = "released, security"
			}
			out = append(out, r.Version+"\t"+desc)
		}
	})
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeFrom connects for a completion, quickly and quietly: no retry, no
// log, at most completionTimeout in all, and read does nothing on failure.
func (g *Global) completeFrom(ctx context.Context, read func(context.Context, *kv.Fleet)) {
	if ctx == nil {
		ctx = context.Background()
	}
	timeout := min(g.Timeout, completionTimeout)
	if timeout <= 0 {
		timeout = completionTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{
		URL: g.NATSURL, Name: "fleetctl completion", Creds: g.Creds, TLS: g.TLS,
		Log:   slog.New(slog.DiscardHandler),
		Extra: []nats.Option{nats.Timeout(timeout), nats.MaxReconnects(0)},
	})
	if err != nil {
		return
	}
	defer nc.Close()
	f, err := kv.Open(ctx, js)
	if err != nil {
		return
	}
	read(ctx, f)
}

// completeApps offers the apps of the stored config, described by their
// installer.
func (g *Global) completeApps(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	var out []string
	g.completeFrom(cmd.Context(), func(ctx context.Context, f *kv.Fleet) {
		cfg, _, err := f.ReadConfig(ctx)
		if err != nil {
			return
		}
		for i, a := range cfg.Value.AppList() {
			if !strings.HasPrefix(a.Name, prefix) {
				continue
			}
			desc := a.EffectiveInstaller()
			if i == 0 {
				desc += ", the default app"
			}
			out = append(out, a.Name+"\t"+desc)
		}
	})
	return out, cobra.ShellCompDirectiveNoFileComp
}
