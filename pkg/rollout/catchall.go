package rollout

import "fmt"

// CatchAllNone as Config.CatchAll: hosts of a group that is not in the
// config follow no group; they wait, as before catch-all groups existed.
// It cannot be a group name (ValidateGroupName refuses it).
const CatchAllNone = "-"

// CatchAllGroup is the group that hosts of groups not in the config follow:
// CatchAll, or the last group when it is "", or none ("", false) for
// CatchAllNone.
func (c Config) CatchAllGroup() (string, bool) {
	switch {
	case c.CatchAll == CatchAllNone:
		return "", false
	case c.CatchAll != "":
		return c.CatchAll, true
	case len(c.Groups) > 0:
		return c.Groups[len(c.Groups)-1].Name, true
	}
	return "", false
}

func (c Config) validateCatchAll() error {
	if c.CatchAll == "" || c.CatchAll == CatchAllNone {
		return nil
	}
	if _, ok := c.Group(c.CatchAll); !ok {
		return fmt.Errorf("catch_all %q: not a group of the config; name one, or %q for none (omitted: the last group)", truncate(c.CatchAll, 70), CatchAllNone)
	}
	return nil
}

// Window lengths (GroupConfig.WindowLength).
const (
	DefaultWindowLength = Duration(60 * 60 * 1e9) // one hour
	minWindowLength     = Duration(15 * 60 * 1e9)
	maxWindowLength     = Duration(24 * 60 * 60 * 1e9)
)

// EffectiveWindowLength is how long each of the group's windows stays
// open: window_length, or DefaultWindowLength when it is not set.
func (g GroupConfig) EffectiveWindowLength() Duration {
	if g.WindowLength == 0 {
		return DefaultWindowLength
	}
	return g.WindowLength
}

// MaxSmallGroup bounds small_group.
const MaxSmallGroup = 1000
