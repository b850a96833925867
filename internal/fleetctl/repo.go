package fleetctl

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/theupdateframework/go-tuf/v2/metadata"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// fleetctl repo: the release repository (docs/release-repo.md). These
// commands work on a directory and key files; none talks to the bus. The
// library (pkg/release) does every signing and every check; these are
// its shell: they load every key before changing anything, so a command
// that fails (a wrong key, a bad version) leaves every file as it was,
// and after a change they say exactly which command comes next.

// RepoOptions are the flags the repo commands share.
type RepoOptions struct {
	*Global
	// Keys are --key: private key files, or directories of *.key files.
	Keys []string
	// Output is text or json for writes, table or json for reads.
	Output string
}

func newRepoCmd(g *Global) *cobra.Command {
	repo := &cobra.Command{
		Use:   "repo",
		Short: "Keep a signed release repository (TUF): keys, releases, signatures, timestamps",
		Long: `A release repository is a directory of static files any web server can serve:
signed metadata (TUF: root, targets, snapshot, timestamp) under metadata/ and
the release files under targets/<app>/<version>/<os>-<arch>/. Hosts given its
root.json install only what its metadata names (agentd enable --release-repo
URL --release-root root.json); the controller lists its releases
(controller --release-repo). These commands need no NATS.

Keys are files, one per key, each held by whoever must sign with it:
root and targets may need several signatures (e.g. 2 of 3 root keys), each
given in a separate 'fleetctl repo sign' by its holder; the timestamp key is
the only one kept online, on the machine whose timer runs
'fleetctl repo timestamp' (deploy/systemd). docs/release-repo.md says who
holds which key and how to rotate each.

One person, one command each:
  fleetctl repo init /srv/repo --generate-keys ~/repo-keys
  fleetctl repo add /srv/repo web-1.2.0.tar.gz --app web --version 1.2.0 \
      --os linux --arch amd64 --key ~/repo-keys
  fleetctl repo ls /srv/repo`,
	}
	repo.AddCommand(newRepoKeygenCmd(g), newRepoInitCmd(g), newRepoAddCmd(g), newRepoFlagCmd(g),
		newRepoSignCmd(g), newRepoPublishCmd(g), newRepoTimestampCmd(g), newRepoRotateKeyCmd(g),
		newRepoRenewCmd(g), newRepoStatusCmd(g), newRepoLsCmd(g))
	return repo
}

const keyFlagHelp = "a private key file to sign with, or a directory of them (*.key); repeat for several"

// ---- keygen ----

func newRepoKeygenCmd(g *Global) *cobra.Command {
	o := &RepoOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "keygen FILE...",
		Short: "Write a new signing key: FILE (private, 0600) and FILE.pub (public)",
		Long: `Write a new Ed25519 key to FILE (PEM PKCS#8, mode 0600) and its public half to
FILE.pub, and print the key's id. The holder keeps FILE; FILE.pub goes to
whoever runs 'fleetctl repo init' or 'fleetctl repo rotate-key'. An existing
file is never overwritten.`,
		Example: `  fleetctl repo keygen alice-root.key              # each holder, on their own machine
  fleetctl repo init /srv/repo --root-key alice-root.key.pub --root-key bob-root.key.pub ...`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			return RunRepoKeygen(o, args)
		},
	}
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunRepoKeygen is "fleetctl repo keygen".
func RunRepoKeygen(o *RepoOptions, files []string) error {
	for _, f := range files {
		for _, p := range []string{f, f + ".pub"} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("%s exists: a key file is never overwritten; nothing done", p)
			}
		}
	}
	var ids, written []string
	for _, f := range files {
		id, err := release.GenerateKey(f)
		if err != nil {
			return err
		}
		ids = append(ids, id)
		written = append(written, f, f+".pub")
	}
	if o.Output == "json" {
		return writeJSON(o.Out, WriteResult{Command: "repo keygen", Written: true, Files: written, Value: map[string]any{"key_ids": ids}})
	}
	for i, f := range files {
		fmt.Fprintf(o.Out, "%s: key %s (keep it; give %s.pub to whoever runs repo init or rotate-key)\n", f, ids[i], f)
	}
	return nil
}

// ---- init ----

// RepoInitOptions are the flags of "fleetctl repo init".
type RepoInitOptions struct {
	RepoOptions
	GenerateKeys                    string
	RootKeys, TargetsKeys           []string
	SnapshotKeys, TimestampKeys     []string
	RootThreshold, TargetsThreshold int
}

func newRepoInitCmd(g *Global) *cobra.Command {
	o := &RepoInitOptions{RepoOptions: RepoOptions{Global: g}}
	cmd := &cobra.Command{
		Use:   "init DIR (--generate-keys KEYDIR | --root-key PUB... --targets-key PUB... --snapshot-key PUB --timestamp-key PUB)",
		Short: "Create a release repository in DIR",
		Long: `Create a release repository in DIR (a new or empty directory).

--generate-keys KEYDIR: one person keeps every key. One key per role is
written to KEYDIR (root.key, targets.key, snapshot.key, timestamp.key, each
with a .pub), and version 1 is signed and published at once.

--root-key/--targets-key/--snapshot-key/--timestamp-key: the public key files
(.pub) of the keys' holders, with --root-threshold and --targets-threshold
(how many of them must sign). Version 1 is staged; each holder then signs
('fleetctl repo sign DIR --key THEIR.key') and someone with the snapshot and
timestamp keys publishes ('fleetctl repo publish'). --key signs at once with
the private keys you hold.

Hand hosts DIR/metadata/root.json once it is published (agentd enable
--release-root); it is public.`,
		Example: `  # one person
  fleetctl repo init /srv/repo --generate-keys ~/repo-keys

  # root 2 of 3 (alice, bob, carol), targets 2 of 3, snapshot and timestamp one each
  fleetctl repo init /srv/repo \
      --root-key alice-root.key.pub --root-key bob-root.key.pub --root-key carol-root.key.pub --root-threshold 2 \
      --targets-key alice-targets.key.pub --targets-key bob-targets.key.pub --targets-key carol-targets.key.pub --targets-threshold 2 \
      --snapshot-key snapshot.key.pub --timestamp-key timestamp.key.pub`,
		Args: exactArgs(1, "DIR: the repository's directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			named := len(o.RootKeys) + len(o.TargetsKeys) + len(o.SnapshotKeys) + len(o.TimestampKeys)
			switch {
			case o.GenerateKeys != "" && named > 0:
				return cliutil.Usagef("--generate-keys writes new keys: it takes no --root-key, --targets-key, --snapshot-key or --timestamp-key")
			case o.GenerateKeys == "" && named == 0:
				return cliutil.Usagef("say whose keys sign: --generate-keys KEYDIR (one person keeps them all), or --root-key, --targets-key, --snapshot-key and --timestamp-key with their .pub files")
			case o.GenerateKeys == "":
				for _, c := range []struct {
					flag  string
					files []string
				}{{"--root-key", o.RootKeys}, {"--targets-key", o.TargetsKeys}, {"--snapshot-key", o.SnapshotKeys}, {"--timestamp-key", o.TimestampKeys}} {
					if len(c.files) == 0 {
						return cliutil.Usagef("%s is missing: every role needs a key (a .pub file from 'fleetctl repo keygen')", c.flag)
					}
				}
			}
			return RunRepoInit(cmd.Context(), o, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.GenerateKeys, "generate-keys", "", "write one new key per role to this directory, then sign and publish v1 (one person keeps every key)")
	f.StringArrayVar(&o.RootKeys, "root-key", nil, "a root key's public key file (.pub); repeat")
	f.StringArrayVar(&o.TargetsKeys, "targets-key", nil, "a targets key's public key file (.pub); repeat")
	f.StringArrayVar(&o.SnapshotKeys, "snapshot-key", nil, "the snapshot key's public key file (.pub)")
	f.StringArrayVar(&o.TimestampKeys, "timestamp-key", nil, "the timestamp key's public key file (.pub): the one key kept online")
	f.IntVar(&o.RootThreshold, "root-threshold", 1, "how many root keys must sign a root")
	f.IntVar(&o.TargetsThreshold, "targets-threshold", 1, "how many targets keys must sign the targets")
	f.StringArrayVar(&o.Keys, "key", nil, keyFlagHelp)
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunRepoInit is "fleetctl repo init".
func RunRepoInit(_ context.Context, o *RepoInitOptions, dir string) error {
	r := &release.Repo{Dir: dir, Now: o.Now}
	if err := repoAbsent(dir); err != nil {
		return err
	}
	signers, err := loadSigners(o.Keys)
	if err != nil {
		return err
	}
	var opts release.InitOptions
	if o.GenerateKeys != "" {
		for _, f := range release.KeyFiles(o.GenerateKeys) {
			for _, p := range []string{f, f + ".pub"} {
				if _, err := os.Lstat(p); err == nil {
					return fmt.Errorf("%s exists: --generate-keys writes new keys and never overwrites one (give another directory); nothing done", p)
				}
			}
		}
		gen, err := release.GenerateRoleKeys(o.GenerateKeys)
		if err != nil {
			return err
		}
		one := func(role string) release.RoleKeys {
			return release.RoleKeys{Keys: []*metadata.Key{gen[role].Key}, Threshold: 1}
		}
		opts = release.InitOptions{Root: one(metadata.ROOT), Targets: one(metadata.TARGETS), Snapshot: one(metadata.SNAPSHOT), Timestamp: one(metadata.TIMESTAMP)}
		for _, role := range release.Roles {
			signers = append(signers, gen[role])
		}
	} else {
		for _, c := range []struct {
			dst       *release.RoleKeys
			flag      string
			files     []string
			threshold int
		}{{&opts.Root, "--root-key", o.RootKeys, o.RootThreshold}, {&opts.Targets, "--targets-key", o.TargetsKeys, o.TargetsThreshold},
			{&opts.Snapshot, "--snapshot-key", o.SnapshotKeys, 1}, {&opts.Timestamp, "--timestamp-key", o.TimestampKeys, 1}} {
			rk, err := release.LoadRoleKeys(c.files, c.threshold)
			if err != nil {
				return cliutil.Usagef("%s: %v; nothing done", c.flag, err)
			}
			*c.dst = rk
		}
		known := map[string]bool{}
		for _, rk := range []release.RoleKeys{opts.Root, opts.Targets, opts.Snapshot, opts.Timestamp} {
			for _, k := range rk.Keys {
				known[release.KeyID(k)] = true
			}
		}
		for _, s := range signers {
			if !known[s.ID] {
				return fmt.Errorf("--key %s: key %s is none of the keys given for the roles; nothing done", s.Path, release.ShortID(s.ID))
			}
		}
	}
	if err := r.Init(opts); err != nil {
		return err
	}
	var lines []string
	if o.GenerateKeys != "" {
		lines = append(lines, fmt.Sprintf("keys written to %s: root.key, targets.key, snapshot.key, timestamp.key (and .pub); move root.key and targets.key offline once you can", o.GenerateKeys))
	}
	lines = append(lines, fmt.Sprintf("repository %s: root v1 and targets v1 staged", dir))
	return finishRepoWrite(o.Global, o.Output, "repo init", r, signers, lines)
}

// repoAbsent refuses a DIR that holds a repository already.
func repoAbsent(dir string) error {
	for _, d := range []string{release.MetadataDir, release.StagedDir} {
		if _, err := os.Stat(filepath.Join(dir, d)); err == nil {
			return fmt.Errorf("%s already holds a repository (%s/ exists): nothing done (fleetctl repo status %s)", dir, d, dir)
		}
	}
	return nil
}

// ---- add ----

// RepoAddOptions are the flags of "fleetctl repo add".
type RepoAddOptions struct {
	RepoOptions
	Custom release.Custom
}

func newRepoAddCmd(g *Global) *cobra.Command {
	o := &RepoAddOptions{RepoOptions: RepoOptions{Global: g}}
	cmd := &cobra.Command{
		Use:   "add DIR FILE --app APP --version V --os OS --arch ARCH",
		Short: "Add a release file for one app, version and platform",
		Long: `Copy FILE into DIR as APP's version V for OS/ARCH
(targets/<app>/<version>/<os>-<arch>/<sha256>.<file>) and stage a targets
version naming it, with its length, sha256 and flags. Adding the same app,
version and platform again replaces the file.

With --key holding enough targets keys and the snapshot and timestamp keys,
it is signed and published at once; otherwise it stays staged and the
command says which 'fleetctl repo sign' and 'fleetctl repo publish' come
next.`,
		Example: `  fleetctl repo add /srv/repo dist/web-1.2.0.tar.gz --app web --version 1.2.0 --os linux --arch amd64 --key ~/repo-keys
  fleetctl repo add /srv/repo dist/web-1.2.1.tar.gz --app web --version 1.2.1 --os linux --arch arm64 --security \
      --notes "fixes CVE-2026-1234"       # staged: each targets key holder then runs repo sign`,
		Args: exactArgs(2, "DIR and FILE: the repository and the release file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			c := o.Custom
			for _, f := range []struct{ flag, v string }{{"--app", c.App}, {"--version", c.Version}, {"--os", c.OS}, {"--arch", c.Arch}} {
				if f.v == "" {
					return cliutil.Usagef("%s is required", f.flag)
				}
			}
			if _, err := release.TargetPath(c.App, c.Version, c.OS, c.Arch, filepath.Base(args[1])); err != nil {
				return cliutil.Usagef("%v; nothing done", err)
			}
			if err := release.CheckNotes(c.Notes); err != nil {
				return cliutil.Usagef("--%v; nothing done", err)
			}
			return RunRepoAdd(cmd.Context(), o, args[0], args[1])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Custom.App, "app", "", "the app (as in the fleet's config) (required)")
	f.StringVar(&o.Custom.Version, "version", "", "the release's version, semver (required)")
	f.StringVar(&o.Custom.OS, "os", "", "the platform's OS, as Go names it: linux, darwin, windows (required)")
	f.StringVar(&o.Custom.Arch, "arch", "", "the platform's architecture, as Go names it: amd64, arm64 (required)")
	f.BoolVar(&o.Custom.Security, "security", false, "the release fixes a security problem: hosts on older versions are flagged")
	f.BoolVar(&o.Custom.EndOfLife, "end-of-life", false, "the version has reached end of life (usually set later, with repo flag)")
	f.StringVar(&o.Custom.Notes, "notes", "", "one line of text for operators (fleetctl releases ls)")
	f.StringArrayVar(&o.Keys, "key", nil, keyFlagHelp)
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunRepoAdd is "fleetctl repo add".
func RunRepoAdd(_ context.Context, o *RepoAddOptions, dir, file string) error {
	r := &release.Repo{Dir: dir, Now: o.Now}
	signers, err := loadRepoSigners(r, o.Keys, nil)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(file); err != nil {
		return fmt.Errorf("%v; nothing done", err)
	} else if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return fmt.Errorf("%s: not a regular, non-empty file; nothing done", file)
	}
	p, err := r.AddTarget(file, o.Custom)
	if err != nil {
		return err
	}
	return finishRepoWrite(o.Global, o.Output, "repo add", r, signers, []string{"added " + p})
}

// ---- flag ----

// RepoFlagOptions are the flags of "fleetctl repo flag".
type RepoFlagOptions struct {
	RepoOptions
	App, Version string
	Security     bool
	EndOfLife    bool
	Notes        string
}

func newRepoFlagCmd(g *Global) *cobra.Command {
	o := &RepoFlagOptions{RepoOptions: RepoOptions{Global: g}}
	cmd := &cobra.Command{
		Use:   "flag DIR --app APP --version V [--security[=false]] [--end-of-life[=false]] [--notes TEXT]",
		Short: "Mark a release security or end of life (on every platform), or change its notes",
		Long: `Change the flags of APP's version V on every platform it was added for, and
stage a targets version with them: signed and published like 'repo add'
(--key, or 'repo sign' then 'repo publish'). Only the flags given change;
--security=false and --end-of-life=false clear one. The controller shows
hosts on an end-of-life version, and hosts older than a security release
(fleetctl releases ls, status, the dashboard, an alert).`,
		Example: `  fleetctl repo flag /srv/repo --app web --version 1.1.0 --end-of-life --notes "upgrade to 1.2.x" --key ~/repo-keys
  fleetctl repo flag /srv/repo --app web --version 1.2.1 --security`,
		Args: exactArgs(1, "DIR: the repository's directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if o.App == "" || o.Version == "" {
				return cliutil.Usagef("--app and --version are required")
			}
			if err := rollout.ValidateAppName(o.App); err != nil {
				return cliutil.Usagef("--app: %v", err)
			}
			if err := rollout.ValidateVersion(o.Version); err != nil {
				return cliutil.Usagef("--version: %v", err)
			}
			var fc release.FlagChange
			if cmd.Flags().Changed("security") {
				fc.Security = &o.Security
			}
			if cmd.Flags().Changed("end-of-life") {
				fc.EndOfLife = &o.EndOfLife
			}
			if cmd.Flags().Changed("notes") {
				if err := release.CheckNotes(o.Notes); err != nil {
					return cliutil.Usagef("--%v; nothing done", err)
				}
				fc.Notes = &o.Notes
			}
			if fc == (release.FlagChange{}) {
				return cliutil.Usagef("nothing to change: give --security, --end-of-life (=false clears one) or --notes")
			}
			return RunRepoFlag(cmd.Context(), o, args[0], fc)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.App, "app", "", "the app (required)")
	f.StringVar(&o.Version, "version", "", "the version (required)")
	f.BoolVar(&o.Security, "security", false, "the release fixes a security problem (=false clears it)")
	f.BoolVar(&o.EndOfLife, "end-of-life", false, "the version has reached end of life (=false clears it)")
	f.StringVar(&o.Notes, "notes", "", "one line of text for operators (\"\" clears it)")
	f.StringArrayVar(&o.Keys, "key", nil, keyFlagHelp)
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunRepoFlag is "fleetctl repo flag".
func RunRepoFlag(_ context.Context, o *RepoFlagOptions, dir string, fc release.FlagChange) error {
	r := &release.Repo{Dir: dir, Now: o.Now}
	signers, err := loadRepoSigners(r, o.Keys, nil)
	if err != nil {
		return err
	}
	changed, err := r.Flag(o.App, o.Version, fc)
	if err != nil {
		return err
	}
	if len(changed) == 0 {
		if o.Output == "json" {
			return writeJSON(o.Out, WriteResult{Command: "repo flag", Written: false})
		}
		fmt.Fprintf(o.Out, "%s %s has those flags already: nothing changed\n", o.App, o.Version)
		return nil
	}
	var lines []string
	for _, p := range changed {
		lines = append(lines, "flagged "+p)
	}
	return finishRepoWrite(o.Global, o.Output, "repo flag", r, signers, lines)
}

// ---- sign ----

func newRepoSignCmd(g *Global) *cobra.Command {
	o := &RepoOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "sign DIR --key KEY",
		Short: "Sign what is staged with your key (one holder of a threshold at a time)",
		Long: `Add your signature to every staged document your key may sign: the staged
root (as a root key of the new root or of the published one: a root change
needs both thresholds) and the staged targets (as a targets key). Each holder
runs it with their own key file, on their own machine if DIR is shared or
copied; the signatures add up. A key that may sign nothing staged is refused
and nothing is written. It then says what is still missing, or that
'fleetctl repo publish' may run.`,
		Example: `  fleetctl repo sign /srv/repo --key alice-targets.key     # alice
  fleetctl repo sign /srv/repo --key bob-targets.key       # bob: 2 of 3, ready
  fleetctl repo publish /srv/repo --snapshot-key snapshot.key --timestamp-key timestamp.key`,
		Args: exactArgs(1, "DIR: the repository's directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if len(o.Keys) == 0 {
				return cliutil.Usagef("--key is required: the private key file you sign with")
			}
			return RunRepoSign(cmd.Context(), o, args[0])
		},
	}
	cmd.Flags().StringArrayVar(&o.Keys, "key", nil, keyFlagHelp)
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunRepoSign is "fleetctl repo sign".
func RunRepoSign(_ context.Context, o *RepoOptions, dir string) error {
	r := &release.Repo{Dir: dir, Now: o.Now}
	signers, err := loadSigners(o.Keys)
	if err != nil {
		return err
	}
	plan := map[*release.Signer][]string{}
	for _, s := range signers {
		roles, err := r.Signable(s)
		if err != nil {
			return err
		}
		if len(roles) == 0 && !fromDir(s, o.Keys) {
			_, err := r.Sign(s) // the library's error names what waits
			return fmt.Errorf("%w; nothing signed", err)
		}
		plan[s] = roles
	}
	var lines []string
	for _, s := range signers {
		if len(plan[s]) == 0 {
			continue
		}
		roles, err := r.Sign(s)
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("signed %s with key %s (%s)", strings.Join(roles, " and "), release.ShortID(s.ID), s.Path))
	}
	if len(lines) == 0 {
		if st, err := r.Status(); err == nil && len(st.Staged) == 0 {
			return fmt.Errorf("nothing is staged in %s: nothing to sign (repo add, flag, rotate-key and renew stage changes)", dir)
		}
		return fmt.Errorf("%w: none of the keys given may sign what is staged in %s ('fleetctl repo status %s' lists who may); nothing signed", release.ErrKeyNotInRole, dir, dir)
	}
	return finishRepoWrite(o.Global, o.Output, "repo sign", r, nil, lines)
}

// ---- publish ----

// RepoPublishOptions are the flags of "fleetctl repo publish".
type RepoPublishOptions struct {
	RepoOptions
	SnapshotKey, TimestampKey string
}

func newRepoPublishCmd(g *Global) *cobra.Command {
	o := &RepoPublishOptions{RepoOptions: RepoOptions{Global: g}}
	cmd := &cobra.Command{
		Use:   "publish DIR --snapshot-key S --timestamp-key T",
		Short: "Serve what is staged and signed: new root and targets, a snapshot and a timestamp",
		Long: `Publish what is staged once it carries enough signatures: a new root (its
own threshold and the old root's), a new targets (its threshold of targets
keys), then a new snapshot and timestamp signed with the keys given. What is
short of signatures is named and nothing is published: every file stays as
it was. With nothing staged it re-signs the snapshot (do it before the
snapshot expires: 'fleetctl repo status' warns).`,
		Example: `  fleetctl repo publish /srv/repo --snapshot-key ~/repo-keys/snapshot.key --timestamp-key /etc/fleetwave/repo/timestamp.key`,
		Args:    exactArgs(1, "DIR: the repository's directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if o.SnapshotKey == "" || o.TimestampKey == "" {
				return cliutil.Usagef("--snapshot-key and --timestamp-key are required: publishing signs a new snapshot and timestamp")
			}
			return RunRepoPublish(cmd.Context(), o, args[0])
		},
	}
	cmd.Flags().StringVar(&o.SnapshotKey, "snapshot-key", "", "the snapshot key's private key file (required)")
	cmd.Flags().StringVar(&o.TimestampKey, "timestamp-key", "", "the timestamp key's private key file (required)")
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunRepoPublish is "fleetctl repo publish".
func RunRepoPublish(_ context.Context, o *RepoPublishOptions, dir string) error {
	r := &release.Repo{Dir: dir, Now: o.Now}
	sn, err := release.LoadSigner(o.SnapshotKey)
	if err != nil {
		return fmt.Errorf("--snapshot-key: %w", err)
	}
	ts, err := release.LoadSigner(o.TimestampKey)
	if err != nil {
		return fmt.Errorf("--timestamp-key: %w", err)
	}
	if err := r.Publish(sn, ts); err != nil {
		return fmt.Errorf("%w; nothing published", err)
	}
	return reportPublished(o.Global, o.Output, "repo publish", r, nil)
}

// ---- timestamp ----

// RepoTimestampOptions are the flags of "fleetctl repo timestamp".
type RepoTimestampOptions struct {
	RepoOptions
	Key     string
	Expires time.Duration
}

func newRepoTimestampCmd(g *Global) *cobra.Command {
	o := &RepoTimestampOptions{RepoOptions: RepoOptions{Global: g}}
	cmd := &cobra.Command{
		Use:   "timestamp DIR --key TIMESTAMP-KEY",
		Short: "Re-sign the timestamp (the timer's job): quiet on success, non-zero on failure",
		Long: `Re-sign DIR's timestamp with a fresh expiry (--expires, default 24h), naming
the snapshot already published. Hosts refuse a repository whose timestamp has
expired (a frozen mirror cannot keep them on old releases), so this runs
from a timer: deploy/systemd/fleetwave-repo-timestamp.timer, every 6 hours.

Prints nothing on success (-o json: the repository's status); on stderr a warning when the root, targets or
snapshot expire within 14 days (they need their offline keys). Fails,
changing nothing, when the snapshot, targets or root have expired already:
a fresh timestamp would not help any host.`,
		Example: `  fleetctl repo timestamp /srv/repo --key /etc/fleetwave/repo/timestamp.key
  fleetctl repo timestamp /srv/repo --key /etc/fleetwave/repo/timestamp.key --expires 12h`,
		Args: exactArgs(1, "DIR: the repository's directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if o.Key == "" {
				return cliutil.Usagef("--key is required: the timestamp key's private key file")
			}
			if o.Expires < 10*time.Minute || o.Expires > 30*24*time.Hour {
				return cliutil.Usagef("--expires %s: want 10m to 720h (a few times the timer's period: 24h for a 6h timer)", o.Expires)
			}
			return RunRepoTimestamp(cmd.Context(), o, args[0])
		},
	}
	cmd.Flags().StringVar(&o.Key, "key", "", "the timestamp key's private key file (required)")
	cmd.Flags().DurationVar(&o.Expires, "expires", release.DefaultExpiry.Timestamp, "how long the new timestamp is valid")
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunRepoTimestamp is "fleetctl repo timestamp".
func RunRepoTimestamp(_ context.Context, o *RepoTimestampOptions, dir string) error {
	r := &release.Repo{Dir: dir, Now: o.Now, Expiry: release.Expiry{Timestamp: o.Expires}}
	s, err := release.LoadSigner(o.Key)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	if err := r.Timestamp(s); err != nil {
		return err
	}
	st, err := r.Status()
	if err != nil {
		return err
	}
	if o.Output == "json" {
		return writeJSON(o.Out, WriteResult{Command: "repo timestamp", Written: true, Value: RepoWriteReport{Published: true, Status: st}})
	}
	for _, w := range st.Warnings {
		fmt.Fprintln(o.ErrOut, "warning: "+w)
	}
	return nil
}

// ---- rotate-key ----

// RepoRotateOptions are the flags of "fleetctl repo rotate-key".
type RepoRotateOptions struct {
	RepoOptions
	Role      string
	Add       []string
	Revoke    []string
	Threshold int
}

func newRepoRotateKeyCmd(g *Global) *cobra.Command {
	o := &RepoRotateOptions{RepoOptions: RepoOptions{Global: g}}
	cmd := &cobra.Command{
		Use:   "rotate-key DIR --role ROLE [--add PUB]... [--revoke KEY]... [--threshold N]",
		Short: "Change a role's keys or threshold: stages a new root for the root keys to sign",
		Long: `Stage root version N+1 with ROLE's keys changed: --add a key (its .pub file),
--revoke one (its key file, .pub file, or key id from 'fleetctl repo status'),
--threshold set how many must sign. Several runs before publishing add up
in the one staged root.

The new root must be signed by the threshold of the CURRENT root keys and by
the threshold of the NEW root keys (a stolen root key below the threshold can
rotate nothing, and a root nobody can sign is never published). Changing the
targets keys also stages a targets version, which the new targets keys
sign. Then 'fleetctl repo publish'. Hosts follow the new root on their next
refresh (no re-enrolment); signatures of revoked keys count for nothing
afterwards.`,
		Example: `  # replace alice's targets key with dave's
  fleetctl repo rotate-key /srv/repo --role targets --add dave-targets.key.pub --revoke alice-targets.key.pub
  fleetctl repo sign /srv/repo --key bob-root.key ; fleetctl repo sign /srv/repo --key carol-root.key
  fleetctl repo sign /srv/repo --key dave-targets.key ; fleetctl repo sign /srv/repo --key bob-targets.key
  fleetctl repo publish /srv/repo --snapshot-key snapshot.key --timestamp-key timestamp.key

  # the timestamp key leaked: replace it (root keys sign; the new key goes to the timer's machine)
  fleetctl repo keygen timestamp-2.key
  fleetctl repo rotate-key /srv/repo --role timestamp --add timestamp-2.key.pub --revoke /etc/fleetwave/repo/timestamp.key.pub`,
		Args: exactArgs(1, "DIR: the repository's directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if !slices.Contains(release.Roles, o.Role) {
				return cliutil.Usagef("--role %q: want one of %s", o.Role, strings.Join(release.Roles, ", "))
			}
			if len(o.Add) == 0 && len(o.Revoke) == 0 && o.Threshold == 0 {
				return cliutil.Usagef("nothing to change: give --add, --revoke or --threshold (to renew the root unchanged: fleetctl repo renew --role root)")
			}
			if o.Threshold < 0 {
				return cliutil.Usagef("--threshold %d: want 1 or more", o.Threshold)
			}
			return RunRepoRotateKey(cmd.Context(), o, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Role, "role", "", "the role whose keys change: root, targets, snapshot or timestamp (required)")
	f.StringArrayVar(&o.Add, "add", nil, "a public key file (.pub) the role gains; repeat")
	f.StringArrayVar(&o.Revoke, "revoke", nil, "a key the role loses: key file, .pub file or key id; repeat")
	f.IntVar(&o.Threshold, "threshold", 0, "the role's new threshold (default: unchanged)")
	f.StringArrayVar(&o.Keys, "key", nil, keyFlagHelp)
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunRepoRotateKey is "fleetctl repo rotate-key".
func RunRepoRotateKey(_ context.Context, o *RepoRotateOptions, dir string) error {
	r := &release.Repo{Dir: dir, Now: o.Now}
	kc := release.KeyChange{Role: o.Role, Threshold: o.Threshold}
	extra := map[string]bool{}
	for _, f := range o.Add {
		k, err := release.LoadPublicKey(f)
		if err != nil {
			return cliutil.Usagef("--add: %v; nothing done", err)
		}
		kc.Add = append(kc.Add, k)
		extra[release.KeyID(k)] = true
	}
	for _, v := range o.Revoke {
		id := v
		if _, err := os.Stat(v); err == nil {
			k, err := release.LoadPublicKey(v)
			if err != nil {
				return cliutil.Usagef("--revoke: %v; nothing done", err)
			}
			id = release.KeyID(k)
		} else if !isKeyID(v) {
			return cliutil.Usagef("--revoke %q: neither a key file nor a key id (64 hex digits, 'fleetctl repo status %s' lists them); nothing done", v, dir)
		}
		kc.Revoke = append(kc.Revoke, id)
	}
	pub, err := r.PublishedRoot()
	if err != nil {
		return err
	}
	if pub != nil {
		for _, id := range pub.Signed.Roles[metadata.ROOT].KeyIDs {
			extra[id] = true // old root keys sign the new root
		}
	}
	signers, err := loadRepoSigners(r, o.Keys, extra)
	if err != nil {
		return err
	}
	root, err := r.RotateKey(kc)
	if err != nil {
		return err
	}
	lines := []string{fmt.Sprintf("staged root v%d: %s keys changed", root.Signed.Version, o.Role)}
	if o.Role == metadata.TARGETS {
		lines = append(lines, "staged a targets version for the new targets keys to sign")
	}
	return finishRepoWrite(o.Global, o.Output, "repo rotate-key", r, signers, lines)
}

func isKeyID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ---- renew ----

// RepoRenewOptions are the flags of "fleetctl repo renew".
type RepoRenewOptions struct {
	RepoOptions
	Role string
}

func newRepoRenewCmd(g *Global) *cobra.Command {
	o := &RepoRenewOptions{RepoOptions: RepoOptions{Global: g}}
	cmd := &cobra.Command{
		Use:   "renew DIR --role root|targets",
		Short: "Stage a new root or targets version with a fresh expiry, nothing else changed",
		Long: `Root (365 days) and targets (90 days) expire; hosts refuse expired metadata.
Before then ('fleetctl repo status' warns 14 days ahead), stage a renewal,
have its keys sign it and publish. The snapshot is renewed by
'fleetctl repo publish' with nothing staged, the timestamp by the timer.`,
		Example: `  fleetctl repo renew /srv/repo --role targets --key alice-targets.key
  fleetctl repo sign /srv/repo --key bob-targets.key
  fleetctl repo publish /srv/repo --snapshot-key snapshot.key --timestamp-key timestamp.key`,
		Args: exactArgs(1, "DIR: the repository's directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if o.Role != metadata.ROOT && o.Role != metadata.TARGETS {
				return cliutil.Usagef("--role %q: want root or targets (the snapshot: fleetctl repo publish; the timestamp: fleetctl repo timestamp)", o.Role)
			}
			return RunRepoRenew(cmd.Context(), o, args[0])
		},
	}
	cmd.Flags().StringVar(&o.Role, "role", "", "root or targets (required)")
	cmd.Flags().StringArrayVar(&o.Keys, "key", nil, keyFlagHelp)
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunRepoRenew is "fleetctl repo renew".
func RunRepoRenew(_ context.Context, o *RepoRenewOptions, dir string) error {
	r := &release.Repo{Dir: dir, Now: o.Now}
	signers, err := loadRepoSigners(r, o.Keys, nil)
	if err != nil {
		return err
	}
	v, err := r.Renew(o.Role)
	if err != nil {
		return err
	}
	return finishRepoWrite(o.Global, o.Output, "repo renew", r, signers, []string{fmt.Sprintf("staged %s v%d (renewed)", o.Role, v)})
}

// ---- keys, signing and publishing after a change ----

// loadSigners loads every --key (a file, or every *.key in a directory)
// before anything changes.
func loadSigners(keys []string) ([]*release.Signer, error) {
	var out []*release.Signer
	seen := map[string]bool{}
	for _, k := range keys {
		files := []string{k}
		if fi, err := os.Stat(k); err == nil && fi.IsDir() {
			files, err = filepath.Glob(filepath.Join(k, "*.key"))
			if err != nil {
				return nil, err
			}
			if len(files) == 0 {
				return nil, cliutil.Usagef("--key %s: a directory with no *.key file; nothing done", k)
			}
		}
		for _, f := range files {
			s, err := release.LoadSigner(f)
			if err != nil {
				return nil, cliutil.Usagef("--key: %v; nothing done", err)
			}
			if !seen[s.ID] {
				seen[s.ID] = true
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// fromDir reports whether s was found in a --key directory (where keys
// of no use here are skipped) rather than named.
func fromDir(s *release.Signer, keys []string) bool {
	return !slices.Contains(keys, s.Path)
}

// loadRepoSigners loads --key and refuses, before anything changes, a
// named key that is no key of the root the next publish trusts (nor in
// extra: keys the command itself adds). Keys from a directory that are
// not are skipped.
func loadRepoSigners(r *release.Repo, keys []string, extra map[string]bool) ([]*release.Signer, error) {
	signers, err := loadSigners(keys)
	if err != nil {
		return nil, err
	}
	var out []*release.Signer
	for _, s := range signers {
		roles, err := r.RolesOf(s.ID)
		if err != nil {
			return nil, err
		}
		if len(roles) > 0 || extra[s.ID] {
			out = append(out, s)
			continue
		}
		if !fromDir(s, keys) {
			return nil, fmt.Errorf("%w: --key %s: key %s is no key of %s's root; nothing done ('fleetctl repo status %s' lists its keys)",
				release.ErrKeyNotInRole, s.Path, release.ShortID(s.ID), r.Dir, r.Dir)
		}
	}
	return out, nil
}

// RepoWriteReport is the Value of a repo write's -o json.
type RepoWriteReport struct {
	// Published: the command published (new snapshot and timestamp).
	Published bool `json:"published"`
	// Status is the repository after the command.
	Status *release.Status `json:"status"`
	// Next are the commands that come next (none when published).
	Next []string `json:"next,omitempty"`
}

// finishRepoWrite signs what was staged with every key that may sign it,
// publishes when that is enough and the snapshot and timestamp keys are
// among signers, and says what happened and what comes next.
func finishRepoWrite(g *Global, output, command string, r *release.Repo, signers []*release.Signer, lines []string) error {
	var sn, ts *release.Signer
	for _, s := range signers {
		roles, err := r.Signable(s)
		if err != nil {
			return err
		}
		if len(roles) > 0 {
			if _, err := r.Sign(s); err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("signed %s with key %s (%s)", strings.Join(roles, " and "), release.ShortID(s.ID), s.Path))
		}
	}
	for _, s := range signers {
		roles, err := r.RolesOf(s.ID)
		if err != nil {
			return err
		}
		if slices.Contains(roles, metadata.SNAPSHOT) && sn == nil {
			sn = s
		}
		if slices.Contains(roles, metadata.TIMESTAMP) && ts == nil {
			ts = s
		}
	}
	if r.Ready() == nil && sn != nil && ts != nil {
		if err := r.Publish(sn, ts); err != nil {
			return err
		}
		return reportPublished(g, output, command, r, lines)
	}
	st, err := r.Status()
	if err != nil {
		return err
	}
	next := nextCommands(r.Dir, st)
	if output == "json" {
		return writeJSON(g.Out, WriteResult{Command: command, Written: true, Changes: lines, Value: RepoWriteReport{Status: st, Next: next}})
	}
	for _, l := range lines {
		fmt.Fprintln(g.Out, l)
	}
	printStaged(g.Out, st)
	if len(next) > 0 {
		fmt.Fprintln(g.Out, "next:")
		for _, n := range next {
			fmt.Fprintln(g.Out, "  "+n)
		}
	}
	return nil
}

func reportPublished(g *Global, output, command string, r *release.Repo, lines []string) error {
	st, err := r.Status()
	if err != nil {
		return err
	}
	var vs []string
	for _, p := range st.Published {
		vs = append(vs, fmt.Sprintf("%s v%d", p.Role, p.Version))
	}
	lines = append(lines, "published: "+strings.Join(vs, ", "))
	if output == "json" {
		return writeJSON(g.Out, WriteResult{Command: command, Written: true, Changes: lines, Value: RepoWriteReport{Published: true, Status: st}})
	}
	for _, l := range lines {
		fmt.Fprintln(g.Out, l)
	}
	fmt.Fprintf(g.Out, "hosts trust %s (agentd enable --release-root)\n", filepath.Join(r.Dir, release.MetadataDir, "root.json"))
	for _, w := range st.Warnings {
		fmt.Fprintln(g.ErrOut, "warning: "+w)
	}
	return nil
}

// nextCommands are the commands that bring what is staged to publication.
func nextCommands(dir string, st *release.Status) []string {
	var out []string
	ready := true
	for _, s := range st.Staged {
		for _, n := range s.Needs {
			if m := n.Missing(); m > 0 {
				ready = false
				var left []string
				for _, k := range n.Keys {
					if !slices.Contains(n.SignedBy, k) {
						left = append(left, release.ShortID(k))
					}
				}
				out = append(out, fmt.Sprintf("fleetctl repo sign %s --key KEY    # %d more of %s (%s v%d needs %d of: %s)",
					dir, m, n.Of, s.Role, s.Version, n.Threshold, strings.Join(left, ", ")))
			}
		}
	}
	if ready || len(out) > 0 {
		out = append(out, fmt.Sprintf("fleetctl repo publish %s --snapshot-key SNAPSHOT-KEY --timestamp-key TIMESTAMP-KEY", dir))
	}
	return out
}

func printStaged(w io.Writer, st *release.Status) {
	for _, s := range st.Staged {
		state := "waiting for signatures"
		if s.Ready {
			state = "signed, ready to publish"
		}
		fmt.Fprintf(w, "staged %s v%d: %s\n", s.Role, s.Version, state)
		for _, n := range s.Needs {
			fmt.Fprintf(w, "  %d of %d %s have signed", len(n.SignedBy), n.Threshold, n.Of)
			if len(n.SignedBy) > 0 {
				fmt.Fprintf(w, " (%s)", strings.Join(shortAll(n.SignedBy), ", "))
			}
			fmt.Fprintln(w)
		}
		for _, c := range s.Changes {
			fmt.Fprintln(w, "  "+c)
		}
	}
}

func shortAll(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = release.ShortID(id)
	}
	return out
}

// ---- status ----

func newRepoStatusCmd(g *Global) *cobra.Command {
	o := &RepoOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "status DIR",
		Short: "What the repository serves, what waits for which signatures, what expires soon",
		Long: `Show the published roles (version, expiry, keys and threshold), each staged
document with the signatures it has and still needs and what it changes,
and a warning for metadata that has expired or expires soon (the timestamp
within 12h, half its default 24h: is the timer running?; root, targets and snapshot
within 14 days). Reads files only. Exit 0 even with warnings; -o json for
monitoring.`,
		Example: `  fleetctl repo status /srv/repo
  fleetctl repo status /srv/repo -o json | jq -r '.warnings[]?'`,
		Args: exactArgs(1, "DIR: the repository's directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			return RunRepoStatus(cmd.Context(), o, args[0])
		},
	}
	outputFlag(cmd, &o.Output)
	return cmd
}

// RunRepoStatus is "fleetctl repo status".
func RunRepoStatus(_ context.Context, o *RepoOptions, dir string) error {
	r := &release.Repo{Dir: dir, Now: o.Now}
	st, err := r.Status()
	if err != nil {
		return err
	}
	if o.Output == "json" {
		return writeJSON(o.Out, st)
	}
	now := o.Now()
	tw := newTable(o.Out)
	fmt.Fprintln(tw, "ROLE\tVERSION\tEXPIRES\tTHRESHOLD\tKEYS")
	for _, p := range st.Published {
		fmt.Fprintf(tw, "%s\tv%d\t%s (in %s)\t%d of %d\t%s\n", p.Role, p.Version, p.Expires.UTC().Format("2006-01-02 15:04Z"),
			until(now, p.Expires), p.Threshold, len(p.Keys), strings.Join(shortAll(p.Keys), " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Published) == 0 {
		fmt.Fprintln(o.Out, "nothing published yet")
	}
	printStaged(o.Out, st)
	if len(st.Staged) == 0 {
		fmt.Fprintln(o.Out, "nothing staged")
	} else {
		fmt.Fprintln(o.Out, "next:")
		for _, n := range nextCommands(dir, st) {
			fmt.Fprintln(o.Out, "  "+n)
		}
	}
	for _, w := range st.Warnings {
		fmt.Fprintln(o.Out, "WARNING: "+w)
	}
	return nil
}

func until(now, t time.Time) string {
	d := t.Sub(now)
	if d <= 0 {
		return "EXPIRED"
	}
	if d >= 48*time.Hour {
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	return d.Round(time.Minute).String()
}

// ---- ls ----

// RepoLsOptions are the flags of "fleetctl repo ls".
type RepoLsOptions struct {
	RepoOptions
	Root string
	App  string
}

// RepoLsReport is "fleetctl repo ls -o json".
type RepoLsReport struct {
	// Source is the directory or URL read.
	Source string `json:"source"`
	// Verified: read through TUF with a trusted root (the URL form);
	// false for a directory, read as its operator's own files.
	Verified       bool  `json:"verified"`
	RootVersion    int64 `json:"root_version,omitempty"`
	TargetsVersion int64 `json:"targets_version,omitempty"`
	// Releases by app, then version (semver).
	Releases []release.Release `json:"releases"`
	// Skipped are targets that name no release (their errors).
	Skipped []string `json:"skipped,omitempty"`
}

func newRepoLsCmd(g *Global) *cobra.Command {
	o := &RepoLsOptions{RepoOptions: RepoOptions{Global: g}}
	cmd := &cobra.Command{
		Use:   "ls DIR | URL --root ROOT.json",
		Short: "List the releases: app, version, platforms, flags",
		Long: `List the published releases of a repository: from its directory (DIR, its
files as they are), or as hosts see it (URL with --root, the root.json hosts
are given: every signature, version and expiry is checked through TUF, and
no file is written). Staged changes are not listed ('fleetctl repo status').`,
		Example: `  fleetctl repo ls /srv/repo
  fleetctl repo ls https://releases.example.com/repo --root root.json --app web
  fleetctl repo ls /srv/repo -o json | jq -r '.releases[] | select(.security) | .version'`,
		Args: exactArgs(1, "DIR or URL: the repository"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			isURL := strings.HasPrefix(args[0], "http://") || strings.HasPrefix(args[0], "https://")
			if isURL && o.Root == "" {
				return cliutil.Usagef("--root is required with a URL: the root.json hosts trust (the repository's metadata/root.json, as you were given it)")
			}
			if !isURL && o.Root != "" {
				return cliutil.Usagef("--root is for a URL; a directory is read as it is")
			}
			if o.App != "" {
				if err := rollout.ValidateAppName(o.App); err != nil {
					return cliutil.Usagef("--app: %v", err)
				}
			}
			return RunRepoLs(cmd.Context(), o, args[0], isURL)
		},
	}
	cmd.Flags().StringVar(&o.Root, "root", "", "the trusted root.json (with a URL)")
	cmd.Flags().StringVar(&o.App, "app", "", "only this app's releases")
	outputFlag(cmd, &o.Output)
	return cmd
}

// RunRepoLs is "fleetctl repo ls".
func RunRepoLs(ctx context.Context, o *RepoLsOptions, src string, isURL bool) error {
	rep := RepoLsReport{Source: src, Releases: []release.Release{}}
	var rs []release.Release
	var bad []error
	if isURL {
		root, err := os.ReadFile(o.Root)
		if err != nil {
			return fmt.Errorf("--root: %w", err)
		}
		ctx, cancel := o.withTimeout(ctx)
		defer cancel()
		c := &release.Client{URL: src, Root: root, HTTP: &http.Client{Timeout: o.Timeout}, RequestTimeout: o.Timeout, Now: o.Now}
		tr, err := c.Refresh(ctx)
		if err != nil {
			return err
		}
		rs, bad = tr.Releases()
		rep.Verified, rep.RootVersion, rep.TargetsVersion = true, tr.RootVersion, tr.TargetsVersion
	} else {
		r := &release.Repo{Dir: src, Now: o.Now}
		var err error
		if rs, bad, err = r.Releases(); err != nil {
			return err
		}
		if t, err := r.PublishedTargets(); err == nil && t != nil {
			rep.TargetsVersion = t.Signed.Version
		}
		if root, err := r.PublishedRoot(); err == nil && root != nil {
			rep.RootVersion = root.Signed.Version
		}
	}
	for _, rel := range newestFirst(rs) { // as releases ls shows them
		if o.App == "" || rel.App == o.App {
			rep.Releases = append(rep.Releases, rel)
		}
	}
	for _, e := range bad {
		rep.Skipped = append(rep.Skipped, e.Error())
	}
	if o.Output == "json" {
		return writeJSON(o.Out, rep)
	}
	if len(rep.Releases) == 0 {
		what := "no releases"
		if o.App != "" {
			what = "no release of " + o.App
		}
		fmt.Fprintf(o.Out, "%s: %s (targets v%d)\n", src, what, rep.TargetsVersion)
	} else {
		tw := newTable(o.Out)
		fmt.Fprintln(tw, "APP\tVERSION\tPLATFORMS\tFLAGS\tNOTES")
		for _, rel := range rep.Releases {
			var flags []string
			if rel.Security {
				flags = append(flags, "security")
			}
			if rel.EndOfLife {
				flags = append(flags, "end_of_life")
			}
			fl := strings.Join(flags, ",")
			if fl == "" {
				fl = "-"
			}
			notes := cell(rel.Notes, 60)
			if notes == "" {
				notes = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(rel.App, 32), cell(rel.Version, 24), cell(strings.Join(rel.Platforms, ","), 40), fl, notes)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, s := range rep.Skipped {
		fmt.Fprintln(o.ErrOut, "skipped: "+s)
	}
	return nil
}

// exactArgs is cobra.ExactArgs with a usage error that names what is
// expected.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return cliutil.Usagef("want %s, got %d argument(s)", what, len(args))
		}
		return nil
	}
}
