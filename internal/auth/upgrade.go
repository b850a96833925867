package auth

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// UpgradeResult says what Upgrade did.
type UpgradeResult struct {
	// Created are the accounts this run minted (AGENTS, CONTROL, EDGE); an
	// earlier, interrupted run may have minted them already.
	Created []string
	// Reissued are the agents and controllers given credentials in their
	// own account by this run.
	Reissued []Record
	// Skipped are those whose every key is revoked: decommissioned hosts and
	// retired controllers get no new credentials.
	Skipped []Record
	// LegacyLeaf are edge sites' leaf users with a valid key in the FLEET
	// account (where a leaf user had all of FLEET): Upgrade cannot know
	// their sites, so each needs 'fleetctl edge add --site S --name NAME'
	// (IssueEdge), and RevokeLegacy then revokes the old key.
	LegacyLeaf []Record
	// Regranted are the accounts whose exports (FLEET) or imports (AGENTS,
	// CONTROL, EDGE) this run re-signed to this version's set: a directory minted
	// before a grant existed (FLEET_AUDIT's create, the timeline read).
	Regranted []GrantChange
}

// GrantChange is one account's grants brought up to date: the subjects of
// the exports or imports added and removed.
type GrantChange struct {
	Account string   `json:"account"`
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// Upgrade brings a directory minted by an older fleetctl to the current
// layout and grants.
//
// Minted before the EDGE account existed, it mints it with its imports and
// gives FLEET the exports it imports; the sites' leaf users, still in FLEET
// with all of it, are listed (LegacyLeaf) for "fleetctl edge add".
//
// Minted before the AGENTS and CONTROL accounts existed (agents and
// controllers users of FLEET), it mints the missing accounts with their
// imports, gives the FLEET account JWT the exports (re-signed with the
// operator's signing key; its users, limits and revocations are kept),
// rewrites resolver.conf, and mints new credentials in AGENTS for every
// agent (same id and group, agents/<id>.creds) and in CONTROL for every
// controller user (creds/<name>.creds) that still has a valid key. The old
// FLEET keys stay valid, so hosts and controllers keep working until they
// get their new creds; RevokeLegacy ends that.
//
// Minted before a grant existed (the controller's create and read of
// FLEET_AUDIT), it re-signs the FLEET exports and the AGENTS and CONTROL
// imports to this version's (Regranted), keeping the rest of each account
// JWT; the creds already issued keep working and gain the grant once the
// account JWTs reach the servers.
//
// It can be run again: an interrupted run resumes, and a finished one finds
// nothing left to do.
func (d Dir) Upgrade() (UpgradeResult, error) {
	var res UpgradeResult
	var missing []string
	for _, name := range importing {
		_, err := d.account(name)
		switch {
		case errors.Is(err, ErrLegacy):
			missing = append(missing, name)
		case err != nil:
			return res, err
		}
	}
	if len(missing) > 0 {
		if err := d.mintImporting(missing); err != nil {
			return res, err
		}
		res.Created = missing
	}
	regranted, err := d.regrant()
	if err != nil {
		return res, err
	}
	res.Regranted = regranted
	recs, err := d.Records()
	if err != nil {
		return res, err
	}
	for _, rec := range recs {
		var err error
		switch {
		case rec.Role == RoleLeaf && rec.hasValidKeyIn(AccountFleet):
			res.LegacyLeaf = append(res.LegacyLeaf, rec)
			continue
		case rec.Role == RoleAgent && rec.Account != AccountAgents:
		case rec.Role == RoleController && rec.Account != AccountControl:
		default:
			continue
		}
		if !rec.hasValidKey() {
			res.Skipped = append(res.Skipped, rec)
			continue
		}
		if rec.Role == RoleAgent {
			_, _, err = d.IssueAgentApps(rollout.AgentID(rec.AgentID), rec.Group, rec.appGrant(), "")
		} else {
			_, _, err = d.IssueUser(rec.Name, rec.Role, "")
		}
		if err != nil {
			return res, fmt.Errorf("%s: %w (run 'fleetctl auth upgrade' again to resume)", rec.Name, err)
		}
		res.Reissued = append(res.Reissued, rec)
	}
	return res, nil
}

// appGrant is the apps rec's agent was last minted for.
func (rec Record) appGrant() AppGrant {
	if rec.Apps == nil {
		return AppGrant{}
	}
	return *rec.Apps
}

func (rec Record) hasValidKey() bool {
	for _, k := range rec.Keys {
		if k.RevokedAt.IsZero() {
			return true
		}
	}
	return false
}

// hasValidKeyIn: a key of rec in account is not revoked.
func (rec Record) hasValidKeyIn(account string) bool {
	for _, k := range rec.Keys {
		if k.RevokedAt.IsZero() && rec.keyAccount(k) == account {
			return true
		}
	}
	return false
}

// regrant re-signs, with the operator's signing key, the FLEET account's
// exports and the AGENTS, CONTROL and EDGE accounts' imports that differ
// from this version's (FleetExports, AgentsImports, ControlImports,
// EdgeImports), keeping
// everything else of each account JWT: users' signing keys, limits,
// revocations. FLEET goes first in the files as on the bus: an import of a
// subject not yet exported is refused. Nothing differs: nothing is written.
func (d Dir) regrant() ([]GrantChange, error) {
	fleet, err := d.account(AccountFleet)
	if err != nil {
		return nil, err
	}
	updated := map[string]string{}
	var changes []GrantChange
	var signer nkeys.KeyPair
	sign := func(ac *jwt.AccountClaims, ch GrantChange) error {
		// The operator's signing key re-signs; fetched only when needed, so
		// an up-to-date directory upgrades without it.
		if signer == nil {
			if signer, err = d.seed(FileOperatorSigningSeed); err != nil {
				return err
			}
		}
		token, err := encodeAccount(ac, signer)
		if err != nil {
			return err
		}
		updated[ch.Account] = token
		changes = append(changes, ch)
		return nil
	}
	if added, removed := diffGrants(exportKeys(fleet.Exports), exportKeys(FleetExports())); len(added)+len(removed) > 0 {
		fleet.Exports = FleetExports()
		if err := sign(fleet, GrantChange{Account: AccountFleet, Added: added, Removed: removed}); err != nil {
			return nil, err
		}
	}
	for _, name := range importing {
		ac, err := d.account(name)
		if err != nil {
			return nil, err
		}
		want := importsOf(name, fleet.Subject)
		if added, removed := diffGrants(importKeys(ac.Imports), importKeys(want)); len(added)+len(removed) > 0 {
			ac.Imports = want
			if err := sign(ac, GrantChange{Account: name, Added: added, Removed: removed}); err != nil {
				return nil, err
			}
		}
	}
	if len(updated) == 0 {
		return nil, nil
	}
	return changes, d.writeAccounts(updated)
}

// exportKeys names each export by what the server acts on: subject, type,
// and a service's response type (none is a singleton).
func exportKeys(exports jwt.Exports) map[string]string {
	out := map[string]string{}
	for _, e := range exports {
		rt := e.ResponseType
		if e.Type == jwt.Service && rt == "" {
			rt = jwt.ResponseTypeSingleton
		}
		out[fmt.Sprintf("%s %s %s %s", e.Subject, e.Type, rt, e.Name)] = string(e.Subject)
	}
	return out
}

// importKeys names each import like exportKeys, with the exporting account
// and the local subject.
func importKeys(imports jwt.Imports) map[string]string {
	out := map[string]string{}
	for _, i := range imports {
		out[fmt.Sprintf("%s %s %s %s %s", i.Subject, i.Type, i.Account, i.LocalSubject, i.Name)] = string(i.Subject)
	}
	return out
}

// diffGrants lists the subjects of the grants in want and not in have
// (added) and in have and not in want (removed), sorted.
func diffGrants(have, want map[string]string) (added, removed []string) {
	for k, subj := range want {
		if _, ok := have[k]; !ok {
			added = append(added, subj)
		}
	}
	for k, subj := range have {
		if _, ok := want[k]; !ok {
			removed = append(removed, subj)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	return added, removed
}

// mintImporting creates the named importing accounts and the FLEET exports
// they import, and writes their keys, the JWTs and resolver.conf.
func (d Dir) mintImporting(names []string) error {
	signer, err := d.seed(FileOperatorSigningSeed)
	if err != nil {
		return err
	}
	fleet, err := d.account(AccountFleet)
	if err != nil {
		return err
	}
	fleet.Exports = FleetExports()
	fleetJWT, err := encodeAccount(fleet, signer)
	if err != nil {
		return err
	}
	updated := map[string]string{AccountFleet: fleetJWT}
	var seeds []File
	for _, name := range names {
		key, err := nkeys.CreateAccount()
		if err != nil {
			return err
		}
		keySigner, err := nkeys.CreateAccount()
		if err != nil {
			return err
		}
		if updated[name], err = encodeAccount(ImportingAccount(name, pub(key), pub(keySigner), fleet.Subject), signer); err != nil {
			return err
		}
		for _, k := range []struct {
			file string
			kp   nkeys.KeyPair
		}{{identitySeedFile[name], key}, {signingSeedFile[name], keySigner}} {
			seed, err := k.kp.Seed()
			if err != nil {
				return err
			}
			seeds = append(seeds, File{Name: k.file, Data: append(seed, '\n'), Secret: true})
		}
	}
	// Seeds first: an account JWT on disk always has its keys beside it.
	if err := WriteFiles(d.Path, seeds...); err != nil {
		return err
	}
	return d.writeAccounts(updated)
}

// RevokeLegacy revokes every agent, controller and leaf key still valid in
// the FLEET account (issued before the upgrade): the last step, once every
// host and controller runs with its new credentials and every edge site
// with the ones "fleetctl edge add" minted. ErrUnknown when there is none.
func (d Dir) RevokeLegacy(now time.Time) (Revocation, error) {
	for _, name := range importing {
		if _, err := d.account(name); err != nil {
			return Revocation{}, fmt.Errorf("%w (then ship the new creds, then --finish)", err)
		}
	}
	recs, err := d.Records()
	if err != nil {
		return Revocation{}, err
	}
	var keys []string
	var changed []File
	for _, rec := range recs {
		file := userRecordFile(rec.Name)
		switch rec.Role {
		case RoleAgent:
			file = agentRecordFile(rollout.AgentID(rec.AgentID))
		case RoleController, RoleLeaf:
		default:
			continue
		}
		touched := false
		for i, k := range rec.Keys {
			if rec.keyAccount(k) == AccountFleet && k.RevokedAt.IsZero() {
				keys = append(keys, k.UserKey)
				rec.Keys[i].RevokedAt = now.UTC().Truncate(time.Second)
				touched = true
			}
		}
		if touched {
			data, err := encodeRecord(rec)
			if err != nil {
				return Revocation{}, err
			}
			changed = append(changed, File{Name: file, Data: data})
		}
	}
	if len(keys) == 0 {
		return Revocation{}, fmt.Errorf("%w: no agent, controller or leaf key left in the FLEET account", ErrUnknown)
	}
	rev, err := d.RevokeKeys(AccountFleet, keys, now)
	if err != nil {
		return Revocation{}, err
	}
	return rev, WriteFiles(d.Path, changed...)
}
