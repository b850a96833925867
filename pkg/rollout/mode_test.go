package rollout

import "testing"

func TestEffectiveMode(t *testing.T) {
	tests := []struct {
		name         string
		config, plan Mode
		want         Mode
	}{
		// RFD 169 "Agent auto update modes" examples (suspended = paused).
		{"both enabled", ModeEnabled, ModeEnabled, ModeEnabled},
		{"customer paused", ModePaused, ModeEnabled, ModePaused},
		{"cloud disabled customer paused", ModePaused, ModeDisabled, ModeDisabled},
		{"cloud disabled customer enabled", ModeEnabled, ModeDisabled, ModeDisabled},
		{"plan paused", ModeEnabled, ModePaused, ModePaused},
		{"both paused", ModePaused, ModePaused, ModePaused},
		{"config disabled", ModeDisabled, ModeEnabled, ModeDisabled},
		{"config disabled plan paused", ModeDisabled, ModePaused, ModeDisabled},
		{"both disabled", ModeDisabled, ModeDisabled, ModeDisabled},
		{"empty is enabled", "", "", ModeEnabled},
		{"empty and paused", "", ModePaused, ModePaused},
		{"unknown counts as paused", "off", ModeEnabled, ModePaused},
		{"unknown and disabled", ModeDisabled, "typo", ModeDisabled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EffectiveMode(tt.config, tt.plan); got != tt.want {
				t.Errorf("EffectiveMode(%q, %q) = %q, want %q", tt.config, tt.plan, got, tt.want)
			}
			if got := EffectiveMode(tt.plan, tt.config); got != tt.want {
				t.Errorf("EffectiveMode(%q, %q) = %q, want %q (not symmetric)", tt.plan, tt.config, got, tt.want)
			}
		})
	}
}
