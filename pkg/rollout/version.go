package rollout

import (
	"fmt"

	"golang.org/x/mod/semver"
)

// MaxVersionLen bounds a version string; anything longer is not a release name
// an operator typed but garbage or an attack on memory.
const MaxVersionLen = 128

// ValidateVersion checks that v is a semantic version written without a
// leading "v" (as release tarballs and update.yaml name them): "1.2.3",
// "1.2.3-rc.1", "1.2.3+build.5".
func ValidateVersion(v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: empty", ErrBadVersion)
	case len(v) > MaxVersionLen:
		return fmt.Errorf("%w: longer than %d bytes", ErrBadVersion, MaxVersionLen)
	case v[0] == 'v':
		return fmt.Errorf("%w %q: write it without the leading \"v\" (%s)", ErrBadVersion, v, v[1:])
	}
	sv := "v" + v
	// semver accepts shorthands such as "v1" and "v1.2"; a release version
	// must spell all three numbers, so require the canonical form (build
	// metadata, which Canonical drops, is allowed). Canonical is "" for an
	// invalid version, never equal to sv.
	if semver.Canonical(sv) != stripBuild(sv) {
		return fmt.Errorf("%w %q: want MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD], e.g. 1.4.2", ErrBadVersion, v)
	}
	return nil
}

// CompareVersions orders two valid versions by semantic-version precedence:
// -1 if a < b, 0 if equal, +1 if a > b.
func CompareVersions(a, b string) int {
	return semver.Compare("v"+a, "v"+b)
}

func stripBuild(v string) string {
	if b := semver.Build(v); b != "" {
		return v[:len(v)-len(b)]
	}
	return v
}
