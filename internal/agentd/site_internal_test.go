package agentd

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
)

// TestSiteDefault (issue 15 point 8): the heartbeat's site is spec.site
// when set, else the last JetStream domain of a server the agent was
// connected to (an empty one, while disconnected, keeps it), and a domain
// that is no valid site name is left out and logged once.
func TestSiteDefault(t *testing.T) {
	long := strings.Repeat("d", 41)
	tests := []struct {
		name     string
		spec     string
		domains  []string // noted in order
		want     string
		wantFrom string
		warnings int
	}{
		{name: "nothing", want: ""},
		{name: "a domain", domains: []string{"edge-berlin"}, want: "edge-berlin", wantFrom: siteFromDomain},
		{name: "disconnected keeps the last", domains: []string{"edge-berlin", ""}, want: "edge-berlin", wantFrom: siteFromDomain},
		{name: "another server's domain", domains: []string{"edge-berlin", "edge-paris"}, want: "edge-paris", wantFrom: siteFromDomain},
		{name: "spec.site wins", spec: "rack-7", domains: []string{"edge-berlin"}, want: "rack-7", wantFrom: siteFromSpec},
		{name: "a domain that is no site name", domains: []string{long, long}, want: "", warnings: 1},
		{name: "a bad domain drops the last good one", domains: []string{"edge-berlin", long}, want: "", warnings: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs natstest.Buffer
			a := &Agent{o: Options{Log: slog.New(slog.NewTextHandler(&logs, nil))}, update: &install.UpdateFile{Spec: install.UpdateSpec{Site: tt.spec}}}
			for _, d := range tt.domains {
				a.noteDomain(d)
			}
			site, from := a.site()
			if site != tt.want || from != tt.wantFrom {
				t.Errorf("site %q from %q, want %q from %q", site, from, tt.want, tt.wantFrom)
			}
			if n := strings.Count(logs.String(), "not a valid site name"); n != tt.warnings {
				t.Errorf("%d warnings, want %d:\n%s", n, tt.warnings, logs.String())
			}
		})
	}
}
