package agentd

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestLabelsFile: key=value lines, comments and blank lines skipped; what
// a tired operator writes wrong is refused with the line that is wrong.
func TestLabelsFile(t *testing.T) {
	t.Parallel()
	good, err := parseLabelsFile(strings.NewReader("# rack and pool\n\nrack=r12\r\n  pool = beta \nempty=\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rollout.Labels{"rack": "r12", "pool": "beta", "empty": ""}, good); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for name, tc := range map[string]struct{ in, want string }{
		"no equals":      {"rack r12\n", "line 1: want key=value"},
		"twice":          {"a=1\na=2\n", "line 2: label a given twice"},
		"upper key":      {"Rack=1\n", "line 1: label key"},
		"space in value": {"pool=a b\n", "line 1: label pool: value"},
		"reserved":       {"os=plan9\n", "agentd's own"},
		"control":        {"pool=a\x1b[31m\n", "printable ASCII"},
		"too large":      {strings.Repeat("# x\n", maxLabelsFile/4+1), "larger than"},
	} {
		if _, err := parseLabelsFile(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// TestLabelFlags: --label k=v, repeatable; --label= clears.
func TestLabelFlags(t *testing.T) {
	t.Parallel()
	l, err := parseLabelFlags([]string{"rack=r1", "note=a=b"})
	if err != nil || !cmp.Equal(l, rollout.Labels{"rack": "r1", "note": "a=b"}) {
		t.Errorf("%v, %v", l, err)
	}
	if l, err := parseLabelFlags([]string{""}); err != nil || l != nil {
		t.Errorf("--label= : %v, %v; want nil (cleared)", l, err)
	}
	for _, bad := range [][]string{{"rack"}, {"rack=1", "rack=2"}, {"arch=arm"}, {"k=a b"}, {"=v"}} {
		if _, err := parseLabelFlags(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if a := autoLabels(); a["os"] == "" || a["arch"] == "" || rollout.Labels(a).Validate() != nil {
		t.Errorf("automatic labels %v", a)
	}
	if got := labelValue("6.8.0 \x01é" + strings.Repeat("x", 80)); len(got) != rollout.MaxLabelValueLen || rollout.ValidateLabel("kernel", got) != nil {
		t.Errorf("labelValue: %q", got)
	}
}

// TestCredPerms: agentd reads what its credentials allow before it reads
// the groups key or moves, with NATS's own wildcards.
func TestCredPerms(t *testing.T) {
	t.Parallel()
	p := &credPerms{allow: []string{"fleet.hb.blue.ID", "fleet.hb.*.ID", "$JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.>"},
		deny: []string{"$JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.group.spec"}}
	for subject, want := range map[string]bool{
		"fleet.hb.red.ID":                  true,
		"fleet.hb.red.OTHER":               false,
		"fleet.hb.app.red.ID":              false,
		planDirectGetSubject("groups"):     true,
		planDirectGetSubject("group.spec"): false,
		"fleet.hb":                         false,
	} {
		if got := p.may(subject); got != want {
			t.Errorf("may(%s) = %v, want %v", subject, got, want)
		}
	}
	if !(*credPerms)(nil).may("anything") {
		t.Error("no credentials (an open bus) must allow")
	}
}
