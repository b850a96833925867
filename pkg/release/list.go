package release

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// checkTarget reads what a target names and checks that it can be
// installed: custom metadata that agrees with its path, a sha256 and a
// length. It returns the custom metadata and the hex sha256.
func checkTarget(p string, tf *metadata.TargetFiles) (Custom, string, error) {
	c, err := DecodeCustom(p, tf.Custom)
	if err != nil {
		return Custom{}, "", err
	}
	sum, ok := tf.Hashes["sha256"]
	if !ok || len(sum) != 32 {
		return Custom{}, "", fmt.Errorf("%w: %q has no sha256", ErrBadTarget, clip(p))
	}
	if tf.Length <= 0 {
		return Custom{}, "", fmt.Errorf("%w: %q has length %d", ErrBadTarget, clip(p), tf.Length)
	}
	return c, hex.EncodeToString(sum), nil
}

// releasesOf groups targets into releases (one per app and version, its
// platforms and flags), by app then version, and lists the targets it
// skipped because they name no release.
func releasesOf(targets map[string]*metadata.TargetFiles) ([]Release, []error) {
	by := map[[2]string]*Release{}
	var bad []error
	for _, p := range sortedKeys(targets) {
		c, _, err := checkTarget(p, targets[p])
		if err != nil {
			bad = append(bad, err)
			continue
		}
		k := [2]string{c.App, c.Version}
		r := by[k]
		if r == nil {
			r = &Release{App: c.App, Version: c.Version}
			by[k] = r
		}
		r.Platforms = append(r.Platforms, Platform(c.OS, c.Arch))
		r.Security = r.Security || c.Security
		r.EndOfLife = r.EndOfLife || c.EndOfLife
		if c.Notes != "" {
			r.Notes = c.Notes
		}
	}
	out := make([]Release, 0, len(by))
	for _, r := range by {
		slices.Sort(r.Platforms)
		out = append(out, *r)
	}
	SortReleases(out)
	slices.SortFunc(bad, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return out, bad
}

// Releases lists the releases the published targets name (what clients
// see once the timestamp is current), and the targets skipped because
// they name none. It reads files only: a repository's own operator
// listing it; hosts and the controller verify through Client.
func (r *Repo) Releases() ([]Release, []error, error) {
	t, err := r.PublishedTargets()
	if err != nil {
		return nil, nil, err
	}
	if t == nil {
		if _, err := r.trustRoot(); err != nil {
			return nil, nil, err
		}
		return nil, nil, nil // initialised, not yet published
	}
	rs, bad := releasesOf(t.Signed.Targets)
	return rs, bad, nil
}
