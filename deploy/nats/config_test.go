package deploy_test

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/fleetwave/fleetwave/internal/auth"
)

// TestConfigsParse reads every shipped config as "nats-server -t" does
// (server.ProcessConfigFile) and checks the settings the rest of fleetwave
// relies on.
func TestConfigsParse(t *testing.T) {
	dir, ad := stage(t)
	type shape struct {
		ServerName  string
		Operator    bool
		FullDirRes  bool
		Domain      string
		ClusterName string
		Routes      int
		LeafListen  bool
		Remotes     int
		RemoteBound bool // a remote bound to the FLEET account
		DenyImports []string
		DenyExports []string
		NoCache     bool // no_sublist_cache: agents' mass (re)subscription stays linear
	}
	cases := []struct {
		file string
		want shape
	}{
		{"single.conf", shape{ServerName: "fleet-nats-1", Operator: true, FullDirRes: true, Domain: "hub", LeafListen: true, NoCache: true}},
		{"cluster-a.conf", shape{ServerName: "nats-a", Operator: true, FullDirRes: true, Domain: "hub", ClusterName: "fleet", Routes: 3, LeafListen: true, NoCache: true}},
		{"cluster-b.conf", shape{ServerName: "nats-b", Operator: true, FullDirRes: true, Domain: "hub", ClusterName: "fleet", Routes: 3, LeafListen: true, NoCache: true}},
		{"cluster-c.conf", shape{ServerName: "nats-c", Operator: true, FullDirRes: true, Domain: "hub", ClusterName: "fleet", Routes: 3, LeafListen: true, NoCache: true}},
		{"leaf-edge.conf", shape{ServerName: "edge-berlin", Operator: true, FullDirRes: true, Domain: "edge-berlin",
			Remotes: 1, RemoteBound: true, DenyImports: []string{"fleet.plan.>"}, DenyExports: []string{"fleet.plan.>"}, NoCache: true}},
	}
	fleetPub := fleetAccount(t, ad)
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			opts, err := server.ProcessConfigFile(filepath.Join(dir, c.file))
			if err != nil {
				t.Fatal(err)
			}
			_, full := opts.AccountResolver.(*server.DirAccResolver)
			got := shape{
				ServerName: opts.ServerName, Operator: len(opts.TrustedOperators) == 1 && opts.SystemAccount != "",
				FullDirRes: full, Domain: opts.JetStreamDomain, ClusterName: opts.Cluster.Name, Routes: len(opts.Routes),
				LeafListen: opts.LeafNode.Port != 0, Remotes: len(opts.LeafNode.Remotes),
				NoCache: opts.NoSublistCache,
			}
			if !opts.JetStream {
				t.Error("JetStream is off")
			}
			for _, r := range opts.LeafNode.Remotes {
				got.RemoteBound = r.LocalAccount == fleetPub && r.Credentials != ""
				got.DenyImports, got.DenyExports = r.DenyImports, r.DenyExports
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// fleetAccount is the FLEET account's public key.
func fleetAccount(t *testing.T, ad auth.Dir) string {
	t.Helper()
	tokens, err := ad.AccountJWTs()
	if err != nil {
		t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(tokens[0])
	if err != nil {
		t.Fatal(err)
	}
	return ac.Subject
}
