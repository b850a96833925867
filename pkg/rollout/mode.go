package rollout

import "fmt"

// Mode says how far fleetwave may act on the fleet. The config (operator) and
// the plan spec each carry one; the lower of the two applies.
type Mode string

// Modes, from lowest to highest.
const (
	// ModeDisabled: fleetwave does not manage updates. Agents are told the
	// target version but never to update, and no group moves.
	ModeDisabled Mode = "disabled"
	// ModePaused: the rollout is frozen where it stands. Agents are told the
	// version of their group's state but never to update, and no group moves.
	ModePaused Mode = "paused"
	// ModeEnabled: groups move and agents are told to update.
	ModeEnabled Mode = "enabled"
)

// Valid reports whether m is one of the three modes.
func (m Mode) Valid() bool {
	switch m {
	case ModeDisabled, ModePaused, ModeEnabled:
		return true
	}
	return false
}

func (m Mode) validate(field string) error {
	if !m.Valid() {
		return fmt.Errorf("%s %q must be enabled, paused or disabled", field, m)
	}
	return nil
}

// rank orders modes. An empty mode is the documented default, enabled; an
// unrecognised one counts as paused, so a typo freezes the rollout rather
// than letting it run or revealing the target to new installs.
func (m Mode) rank() int {
	switch m {
	case ModeDisabled:
		return 0
	case ModeEnabled, "":
		return 2
	default:
		return 1
	}
}

func (m Mode) normal() Mode {
	switch m.rank() {
	case 0:
		return ModeDisabled
	case 2:
		return ModeEnabled
	}
	return ModePaused
}

// EffectiveMode is the lowest of the config mode and the plan mode
// (disabled < paused < enabled). Empty means enabled; an unrecognised value
// counts as paused.
func EffectiveMode(config, plan Mode) Mode {
	return lowestMode(config, plan)
}

func lowestMode(modes ...Mode) Mode {
	low := ModeEnabled
	for _, m := range modes {
		if m.rank() < low.rank() {
			low = m.normal()
		}
	}
	return low
}
