package rollout

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestNewGroupSettingsDecode: the settings of the peers' strategies
// (catch_all, window_length, small_group, rate, adaptive_in_flight,
// selector) decode, validate and round-trip; omitted, they leave the
// config as it was (the default config's JSON does not change).
func TestNewGroupSettingsDecode(t *testing.T) {
	t.Parallel()
	const in = `{"v":1,"catch_all":"prod","groups":[
		{"name":"canary","window_length":"3h","small_group":3},
		{"name":"prod","rate":{"start":"10/min","factor":2,"max":"500/min"},"adaptive_in_flight":true,"selector":{"env":"prod","region":"eu-1"}}]}`
	var c Config
	if err := json.Unmarshal([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	canary, prod := c.Groups[0], c.Groups[1]
	if canary.EffectiveWindowLength() != Duration(3*time.Hour) || canary.SmallGroup != 3 {
		t.Errorf("canary: %+v", canary)
	}
	if r := prod.Rate; r == nil || r.Start != (RatePer{10, time.Minute}) || r.Factor != 2 || r.Max.PerMinute() != 500 {
		t.Errorf("rate: %+v", prod.Rate)
	}
	if !prod.AdaptiveInFlight || !prod.Selector.Matches(Labels{"env": "prod", "region": "eu-1", "os": "linux"}) || prod.Selector.Matches(Labels{"env": "prod"}) {
		t.Errorf("prod: %+v", prod)
	}
	if g, ok := c.CatchAllGroup(); !ok || g != "prod" {
		t.Errorf("catch-all %q %v", g, ok)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var again Config
	if err := json.Unmarshal(b, &again); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if !strings.Contains(string(b), `"rate":{"start":"10/min","factor":2,"max":"500/min"}`) || !strings.Contains(string(b), `"window_length":"3h"`) {
		t.Errorf("encoded: %s", b)
	}
	d := DefaultConfig()
	if g, ok := d.CatchAllGroup(); !ok || g != DefaultGroupName || d.Groups[0].EffectiveWindowLength() != DefaultWindowLength {
		t.Errorf("default: catch-all %q %v, window %s", g, ok, d.Groups[0].EffectiveWindowLength())
	}
	d.CatchAll = CatchAllNone
	if _, ok := d.CatchAllGroup(); ok {
		t.Error("catch_all \"-\" still names a group")
	}
}

// TestNewGroupSettingsRefused: each bad value is refused with the field
// named.
func TestNewGroupSettingsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ config, want string }{
		{`{"v":1,"catch_all":"nope","groups":[{"name":"a"}]}`, `catch_all "nope": not a group`},
		{`{"v":1,"groups":[{"name":"a","window_length":"5m"}]}`, `window_length "5m" must be 15m-24h`},
		{`{"v":1,"groups":[{"name":"a","window_length":"25h"}]}`, `window_length "25h" must be 15m-24h`},
		{`{"v":1,"groups":[{"name":"a","small_group":-1}]}`, `small_group -1 must be 0-1000`},
		{`{"v":1,"groups":[{"name":"a","rate":{"factor":2}}]}`, `rate: start is required`},
		{`{"v":1,"groups":[{"name":"a","rate":{"start":"10/min","factor":2}}]}`, `a factor above 1 needs a max`},
		{`{"v":1,"groups":[{"name":"a","rate":{"start":"10/min","factor":11,"max":"20/min"}}]}`, `factor 11 must be 1-10`},
		{`{"v":1,"groups":[{"name":"a","rate":{"start":"600/min","max":"5/s"}}]}`, `max 5/s is below start 600/min`},
		{`{"v":1,"groups":[{"name":"a","rate":{"start":"ten/min"}}]}`, `rate "ten/min": write a count`},
		{`{"v":1,"groups":[{"name":"a","rate":{"start":"10/week"}}]}`, `rate "10/week": write a count`},
		{`{"v":1,"groups":[{"name":"a","selector":{"Env":"prod"}}]}`, `label key "Env"`},
		{`{"v":1,"groups":[{"name":"a","selector":{"env":"a b"}}]}`, `use printable ASCII without spaces`},
		{`{"v":1,"groups":[{"name":"a","selector":{"env":"\u001b[2J"}}]}`, `use printable ASCII without spaces`},
	} {
		var c Config
		err := json.Unmarshal([]byte(tc.config), &c)
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.config, err, tc.want)
		}
	}
}
