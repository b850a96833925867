package attacktest

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/fleetwave/fleetwave/internal/auth"
)

// grantsBeforeApps are the FLEET account's exports and the AGENTS, CONTROL
// and EDGE accounts' imports as fleetctl minted them before apps (commit
// f369507: internal/auth's FleetExports, AgentsImports, ControlImports and
// EdgeImports, written out by that code).
//
//go:embed testdata/grants-f369507.json
var grantsBeforeApps []byte

// GrantsBeforeApps are the pre-apps grants: FLEET's exports, and the subjects
// each importing account imported.
type GrantsBeforeApps struct {
	Commit         string      `json:"commit"`
	FleetExports   jwt.Exports `json:"fleet_exports"`
	AgentsImports  []string    `json:"agents_imports"`
	ControlImports []string    `json:"control_imports"`
	EdgeImports    []string    `json:"edge_imports"`
}

// BeforeApps returns the pre-apps grants.
func BeforeApps(t *testing.T) GrantsBeforeApps {
	t.Helper()
	var g GrantsBeforeApps
	if err := json.Unmarshal(grantsBeforeApps, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.FleetExports) == 0 || len(g.AgentsImports) == 0 || len(g.ControlImports) == 0 || len(g.EdgeImports) == 0 {
		t.Fatalf("testdata/grants-%s.json holds no grants", g.Commit)
	}
	return g
}

// MakeBeforeApps turns a fresh auth directory into one minted before apps:
// its FLEET account exports, and its AGENTS, CONTROL and EDGE accounts
// import, exactly what they did at that commit, re-signed with the
// operator's signing key as fleetctl did (keys, limits, revocations kept);
// resolver.conf rewritten. Users are the caller's: a user JWT names no
// export, so an agent minted for the default app today is one minted then.
func MakeBeforeApps(t *testing.T, d auth.Dir) {
	t.Helper()
	g := BeforeApps(t)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(d.Path, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(bytes.TrimSpace(b))
	}
	signer, err := nkeys.FromSeed([]byte(read(auth.FileOperatorSigningSeed)))
	if err != nil {
		t.Fatal(err)
	}
	decode := func(file string) *jwt.AccountClaims {
		ac, err := jwt.DecodeAccountClaims(read(file))
		if err != nil {
			t.Fatal(err)
		}
		return ac
	}
	encode := func(ac *jwt.AccountClaims) string {
		token, err := ac.Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		return token
	}
	fleet := decode(auth.FileFleetJWT)
	fleet.Exports = g.FleetExports
	tokens := map[string]string{auth.AccountFleet: encode(fleet)}
	for acc, subjects := range map[string][]string{auth.AccountAgents: g.AgentsImports, auth.AccountControl: g.ControlImports, auth.AccountEdge: g.EdgeImports} {
		file, _ := auth.AccountFiles(acc)
		ac := decode(file)
		ac.Imports = nil
		for _, subj := range subjects {
			var exp *jwt.Export
			for _, e := range g.FleetExports {
				if string(e.Subject) == subj {
					exp = e
				}
			}
			if exp == nil {
				t.Fatalf("%s imported %s, which FLEET did not export", acc, subj)
			}
			ac.Imports.Add(&jwt.Import{Name: exp.Name, Subject: exp.Subject, Account: fleet.Subject, Type: exp.Type})
		}
		tokens[acc] = encode(ac)
	}
	files := []auth.File{}
	all := []string{read(auth.FileSystemJWT)}
	for _, acc := range []string{auth.AccountFleet, auth.AccountAgents, auth.AccountControl, auth.AccountEdge} {
		file, _ := auth.AccountFiles(acc)
		files = append(files, auth.File{Name: file, Data: []byte(tokens[acc] + "\n")})
		all = append(all, tokens[acc])
	}
	conf, err := auth.ResolverConf(read(auth.FileOperatorJWT), all...)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteFiles(d.Path, append(files, auth.File{Name: auth.FileResolverConf, Data: conf})...); err != nil {
		t.Fatal(err)
	}
}
