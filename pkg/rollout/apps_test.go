package rollout_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

func decodeConfig(t *testing.T, s string) rollout.Config {
	t.Helper()
	var c rollout.Config
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return c
}

func TestAppsDefaultWithoutApps(t *testing.T) {
	c := rollout.DefaultConfig()
	if got := c.AppNames(); len(got) != 1 || got[0] != rollout.DefaultAppName {
		t.Fatalf("AppNames = %v, want [%s]", got, rollout.DefaultAppName)
	}
	if !c.IsDefaultApp("") || !c.IsDefaultApp(rollout.DefaultAppName) || c.IsDefaultApp("web") {
		t.Fatal("IsDefaultApp wrong")
	}
}

func TestAppsOverridesApply(t *testing.T) {
	c := decodeConfig(t, `{"v":1,"groups":[{"name":"dev","canary_count":1},{"name":"prod","max_in_flight":"10%"}],
		"apps":[{"name":"web"},{"name":"db","installer":"script","overrides":{"prod":{"max_in_flight":"5%","canary_count":2}}}]}`)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.DefaultApp() != "web" {
		t.Fatalf("default app %q", c.DefaultApp())
	}
	db, err := c.ForApp("db")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := db.Group("prod")
	if g.MaxInFlight != 5 || g.CanaryCount != 2 {
		t.Fatalf("db prod = %+v", g)
	}
	dev, _ := db.Group("dev")
	if dev.CanaryCount != 1 {
		t.Fatalf("dev changed: %+v", dev)
	}
	web, _ := c.ForApp("web")
	if g, _ := web.Group("prod"); g.MaxInFlight != 10 {
		t.Fatalf("web prod = %+v", g)
	}
	if _, err := c.ForApp("nope"); err == nil {
		t.Fatal("unknown app accepted")
	}
}

func TestAppsValidateRefuses(t *testing.T) {
	for _, tc := range []struct{ name, apps, want string }{
		{"bad name", `[{"name":"Web"}]`, "invalid app name"},
		{"reserved", `[{"name":"group"}]`, "reserved"},
		{"twice", `[{"name":"a"},{"name":"a"}]`, "listed twice"},
		{"installer", `[{"name":"a","installer":"rpm"}]`, "installer"},
		{"unknown group", `[{"name":"a","overrides":{"qa":{"canary_count":1}}}]`, "does not have"},
		{"depends_on", `[{"name":"a","overrides":{"dev":{"depends_on":[]}}}]`, "fleet's"},
		{"bad value", `[{"name":"a","overrides":{"dev":{"canary_count":99}}}]`, "canary_count"},
		{"unknown field", `[{"name":"a","overrides":{"dev":{"canaries":1}}}]`, "canaries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c rollout.Config
			err := json.Unmarshal([]byte(`{"v":1,"groups":[{"name":"dev"}],"apps":`+tc.apps+`}`), &c)
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
	var c rollout.Config
	if err := json.Unmarshal([]byte(`{"v":1,"apps":[{"name":"a","bogus":1}]}`), &c); err == nil {
		t.Fatal("unknown app field accepted")
	}
}

func TestAppsDefaultAppCannotChange(t *testing.T) {
	none := rollout.DefaultConfig()
	named := decodeConfig(t, `{"v":1,"apps":[{"name":"web"},{"name":"db"}]}`)
	if err := rollout.CheckConfigChange(none, named, nil); err != nil {
		t.Fatalf("naming the default app refused: %v", err)
	}
	swapped := decodeConfig(t, `{"v":1,"apps":[{"name":"db"},{"name":"web"}]}`)
	err := rollout.CheckConfigChange(named, swapped, nil)
	if !errors.Is(err, rollout.ErrConfigChange) || !strings.Contains(err.Error(), `"web"`) {
		t.Fatalf("swap: %v", err)
	}
}
