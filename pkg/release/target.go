package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// A target's path in the repository names what it is:
//
//	<app>/<version>/<os>-<arch>/<file>
//
// and its custom metadata (Custom) says the same again, with the flags an
// operator may set. Both are checked: a target whose path and custom
// metadata disagree is not a release of anything.
const (
	// MaxFileName bounds a target's file name.
	MaxFileName = 128
	// MaxNotes bounds Custom.Notes.
	MaxNotes = 1024
)

// ErrBadTarget: a target path or custom metadata that does not name one
// app, version and platform.
var ErrBadTarget = errors.New("not a release target")

// Custom is a target's custom metadata ("custom" in targets.json).
type Custom struct {
	App     string `json:"app"`
	Version string `json:"version"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	// Security marks a release that fixes a security problem: hosts on an
	// older version of the app are "behind a security release".
	Security bool `json:"security,omitempty"`
	// EndOfLife marks a version no host should still run.
	EndOfLife bool `json:"end_of_life,omitempty"`
	// Notes is free text from the operator (data: escaped on terminals).
	Notes string `json:"notes,omitempty"`
}

// Platform is "<os>-<arch>", e.g. "linux-amd64".
func Platform(goos, goarch string) string { return goos + "-" + goarch }

// TargetPath is the repository path of app's version for os/arch.
func TargetPath(app, version, goos, goarch, file string) (string, error) {
	p := app + "/" + version + "/" + Platform(goos, goarch) + "/" + file
	if _, err := ParseTargetPath(p); err != nil {
		return "", err
	}
	return p, nil
}

// ParseTargetPath reads a target path back into what it names (flags
// unset).
func ParseTargetPath(p string) (Custom, error) {
	parts := strings.Split(p, "/")
	if len(parts) != 4 {
		return Custom{}, fmt.Errorf("%w: %q: want <app>/<version>/<os>-<arch>/<file>", ErrBadTarget, clip(p))
	}
	goos, goarch, ok := strings.Cut(parts[2], "-")
	c := Custom{App: parts[0], Version: parts[1], OS: goos, Arch: goarch}
	if !ok {
		return Custom{}, fmt.Errorf("%w: %q: platform %q: want <os>-<arch>", ErrBadTarget, clip(p), clip(parts[2]))
	}
	if err := c.check(); err != nil {
		return Custom{}, fmt.Errorf("%w: %q: %v", ErrBadTarget, clip(p), err)
	}
	file := parts[3]
	if file == "" || len(file) > MaxFileName || file == "." || file == ".." || path.Clean(file) != file || !isName(file, true) {
		return Custom{}, fmt.Errorf("%w: %q: file name %q: want up to %d of [A-Za-z0-9._-]", ErrBadTarget, clip(p), clip(file), MaxFileName)
	}
	return c, nil
}

// check validates the identity fields.
func (c Custom) check() error {
	if err := rollout.ValidateAppName(c.App); err != nil {
		return err
	}
	if err := rollout.ValidateVersion(c.Version); err != nil {
		return err
	}
	if c.OS == "" || len(c.OS) > 32 || !isName(c.OS, false) {
		return fmt.Errorf("os %q: want up to 32 of [a-z0-9]", clip(c.OS))
	}
	if c.Arch == "" || len(c.Arch) > 32 || !isName(c.Arch, false) {
		return fmt.Errorf("arch %q: want up to 32 of [a-z0-9]", clip(c.Arch))
	}
	if len(c.Notes) > MaxNotes {
		return fmt.Errorf("notes: longer than %d bytes", MaxNotes)
	}
	return nil
}

// DecodeCustom reads a target's custom metadata and checks that it names
// what its path names.
func DecodeCustom(targetPath string, raw *json.RawMessage) (Custom, error) {
	want, err := ParseTargetPath(targetPath)
	if err != nil {
		return Custom{}, err
	}
	if raw == nil {
		return Custom{}, fmt.Errorf("%w: %q has no custom metadata", ErrBadTarget, clip(targetPath))
	}
	var c Custom
	if err := json.Unmarshal(*raw, &c); err != nil {
		return Custom{}, fmt.Errorf("%w: %q: custom metadata: %v", ErrBadTarget, clip(targetPath), err)
	}
	if c.App != want.App || c.Version != want.Version || c.OS != want.OS || c.Arch != want.Arch {
		return Custom{}, fmt.Errorf("%w: %q: custom metadata names %s %s %s, the path %s %s %s",
			ErrBadTarget, clip(targetPath), clip(c.App), clip(c.Version), Platform(clip(c.OS), clip(c.Arch)), want.App, want.Version, Platform(want.OS, want.Arch))
	}
	if err := c.check(); err != nil {
		return Custom{}, fmt.Errorf("%w: %q: %v", ErrBadTarget, clip(targetPath), err)
	}
	return c, nil
}

// isName: lower-case letters and digits; with file, also upper case, '.',
// '_' and '-'.
func isName(s string, file bool) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case file && (r >= 'A' && r <= 'Z' || r == '.' || r == '_' || r == '-'):
		default:
			return false
		}
	}
	return true
}

// clip shortens what a peer sent before it goes into an error.
func clip(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

// Release is one version of one app in the repository.
type Release = rollout.Release

// SortReleases orders rs by app, then version (semver, oldest first).
func SortReleases(rs []Release) { rollout.SortReleases(rs) }
