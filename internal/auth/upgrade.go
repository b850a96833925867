package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// UpgradeResult says what Upgrade did.
type UpgradeResult struct {
	// AgentsAccount is the AGENTS account's public key; Created says it was
	// minted by this run (false: an earlier, interrupted run did).
	AgentsAccount string
	Created       bool
	// Reissued are the agents given credentials in AGENTS by this run.
	Reissued []Record
	// Skipped are agents whose every key is revoked: decommissioned hosts
	// get no new credentials.
	Skipped []Record
}

// Upgrade brings a directory minted before the AGENTS account existed (every
// agent a user of FLEET) to the current layout: it mints the AGENTS account
// with its imports, adds the exports to the FLEET account JWT (re-signed with
// the operator's signing key; its users, limits and revocations are kept),
// rewrites resolver.conf, and mints new credentials in AGENTS for every agent
// that still has a valid key, for the same id and group
// (agents/<id>.creds). The old FLEET keys stay valid, so hosts keep working
// until they get their new creds; RevokeLegacyAgents ends that.
//
// It can be run again: an interrupted run resumes, and a finished one finds
// nothing left to do.
func (d Dir) Upgrade() (UpgradeResult, error) {
	var res UpgradeResult
	agents, err := d.account(AccountAgents)
	switch {
	case errors.Is(err, ErrLegacy):
		if res.AgentsAccount, err = d.mintAgentsAccount(); err != nil {
			return res, err
		}
		res.Created = true
	case err != nil:
		return res, err
	default:
		res.AgentsAccount = agents.Subject
	}
	recs, err := d.Records()
	if err != nil {
		return res, err
	}
	for _, rec := range recs {
		if rec.Role != RoleAgent || rec.Account == AccountAgents {
			continue
		}
		if !rec.hasValidKey() {
			res.Skipped = append(res.Skipped, rec)
			continue
		}
		if _, _, err := d.IssueAgent(rollout.AgentID(rec.AgentID), rec.Group, ""); err != nil {
			return res, fmt.Errorf("agent %s: %w (run 'fleetctl auth upgrade' again to resume)", rec.AgentID, err)
		}
		res.Reissued = append(res.Reissued, rec)
	}
	return res, nil
}

func (rec Record) hasValidKey() bool {
	for _, k := range rec.Keys {
		if k.RevokedAt.IsZero() {
			return true
		}
	}
	return false
}

// mintAgentsAccount creates the AGENTS account and the FLEET exports it
// imports, and writes keys, JWTs and resolver.conf.
func (d Dir) mintAgentsAccount() (string, error) {
	signer, err := d.seed(FileOperatorSigningSeed)
	if err != nil {
		return "", err
	}
	fleet, err := d.account(AccountFleet)
	if err != nil {
		return "", err
	}
	fleet.Exports = FleetExports()
	fleetJWT, err := encodeAccount(fleet, signer)
	if err != nil {
		return "", err
	}
	key, err := nkeys.CreateAccount()
	if err != nil {
		return "", err
	}
	keySigner, err := nkeys.CreateAccount()
	if err != nil {
		return "", err
	}
	agentsJWT, err := encodeAccount(AgentsAccount(pub(key), pub(keySigner), fleet.Subject), signer)
	if err != nil {
		return "", err
	}
	var seeds []File
	for _, k := range []struct {
		name string
		kp   nkeys.KeyPair
	}{{FileAgentsSeed, key}, {FileAgentsSigningSeed, keySigner}} {
		seed, err := k.kp.Seed()
		if err != nil {
			return "", err
		}
		seeds = append(seeds, File{Name: k.name, Data: append(seed, '\n'), Secret: true})
	}
	// Seeds first: an account JWT on disk always has its keys beside it.
	if err := WriteFiles(d.Path, seeds...); err != nil {
		return "", err
	}
	return pub(key), d.writeAccounts(map[string]string{AccountFleet: fleetJWT, AccountAgents: agentsJWT})
}

// RevokeLegacyAgents revokes every agent key still valid in the FLEET
// account (issued before the upgrade): the last step, once every host runs
// with its AGENTS credentials. ErrUnknown when there is none.
func (d Dir) RevokeLegacyAgents(now time.Time) (Revocation, error) {
	if _, err := os.Stat(d.path(FileAgentsJWT)); errors.Is(err, fs.ErrNotExist) {
		return Revocation{}, fmt.Errorf("%s has no AGENTS account yet: run 'fleetctl auth upgrade' first, ship the new creds, then --finish", d.Path)
	}
	recs, err := d.Records()
	if err != nil {
		return Revocation{}, err
	}
	var keys []string
	var changed []File
	for _, rec := range recs {
		if rec.Role != RoleAgent {
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
			changed = append(changed, File{Name: agentRecordFile(rollout.AgentID(rec.AgentID)), Data: data})
		}
	}
	if len(keys) == 0 {
		return Revocation{}, fmt.Errorf("%w: no agent key left in the FLEET account", ErrUnknown)
	}
	rev, err := d.RevokeKeys(AccountFleet, keys, now)
	if err != nil {
		return Revocation{}, err
	}
	return rev, WriteFiles(d.Path, changed...)
}
