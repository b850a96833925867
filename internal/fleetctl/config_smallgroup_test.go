package fleetctl

import (
	"strings"
	"testing"
)

// TestConfigSetSmallGroupBinary (issue 28 point 4): the real binary's
// config set --small-group writes small_group and says so; a value out of
// range or not a number, or the flag without --group, is a usage error
// (exit 2) that writes nothing.
func TestConfigSetSmallGroupBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := fleetctlBin(t) // first: the env's 30s context starts with it
	e := newEnv(t)
	e.mustRun(configSet(ConfigSetOptions{Group: "edge", Add: true}))
	out, stderr, code := runBin(t, bin, nil, "--nats", e.srv.URL(), "config", "set", "--group", "edge", "--small-group", "3", "--reason", "tiny site")
	if code != 0 || !strings.Contains(out, `group "edge": small_group 0 → 3`) {
		t.Fatalf("exit %d, out %q, stderr %q: want small_group 0 → 3 written", code, out, stderr)
	}
	if g, _ := e.config().Value.Group("edge"); g.SmallGroup != 3 {
		t.Errorf("small_group %d, want 3", g.SmallGroup)
	}
	rev := e.configRevision()
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--group", "edge", "--small-group", "1001"}, `group "edge": small_group 1001 must be 0-1000`},
		{[]string{"--group", "edge", "--small-group", "-1"}, `small_group -1 must be 0-1000`},
		{[]string{"--group", "edge", "--small-group", "three"}, `invalid argument "three" for "--small-group"`},
		{[]string{"--small-group", "3"}, "--small-group: say which group with --group"},
	} {
		args := append([]string{"--nats", e.srv.URL(), "config", "set"}, bad.args...)
		_, stderr, code := runBin(t, bin, nil, args...)
		if code != 2 || !strings.Contains(stderr, bad.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", bad.args, code, stderr, bad.want)
		}
	}
	if e.configRevision() != rev {
		t.Errorf("a refused --small-group wrote the config")
	}
}
