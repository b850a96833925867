package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The auth commands that mint and revoke ("auth agent", "auth user", "auth
// revoke") write the auth directory, not the bus; their audit records go
// to FLEET_AUDIT like every other write's, when the command reaches the
// bus. "auth revoke" reaches it to push (unless --push=false); the mints
// reach it only when --nats or NATS_URL names it, so that minting on an
// offline machine keeps working. On the bus the record is published as an
// admin (--creds, else <dir>/creds/admin.creds), after the directory was
// written, exactly as the other writes do: a record that is not stored is
// an AuditError (stderr at once, exit 1), and never touches the directory.
// Off the bus, stderr says that no record was written and how to get one.

// auditBucket is the "bucket" of an auth command's audit record: the auth
// directory; its "key" is the file that holds what changed.
const auditBucket = "auth"

// authAuditValue is what an auth command's audit record shows of a user or
// an agent, before and after: names and public keys, never a seed, a creds
// file or a JWT.
type authAuditValue struct {
	Account string    `json:"account"`
	Name    string    `json:"name,omitempty"`
	Role    auth.Role `json:"role,omitempty"`
	AgentID string    `json:"agent_id,omitempty"`
	Group   string    `json:"group,omitempty"`
	// Apps are an agent's apps when not the default app alone ("*": any).
	Apps string `json:"apps,omitempty"`
	// Site is an edge site's leaf user's site.
	Site string `json:"site,omitempty"`
	// Keys are the user's public keys still valid, oldest first.
	Keys []string `json:"keys,omitempty"`
	// Revoked are its public keys revoked.
	Revoked []string `json:"revoked,omitempty"`
}

func auditValueOf(rec auth.Record) *authAuditValue {
	v := &authAuditValue{Account: rec.Account, Name: rec.Name, Role: rec.Role, AgentID: rec.AgentID, Group: rec.Group, Site: rec.Site}
	if rec.Apps != nil {
		v.Apps = rec.Apps.String()
	}
	for _, k := range rec.Keys {
		if k.RevokedAt.IsZero() {
			v.Keys = append(v.Keys, k.UserKey)
		} else {
			v.Revoked = append(v.Revoked, k.UserKey)
		}
	}
	return v
}

// recordValue is the audit value of the record read returns, or nil when
// the directory keeps none: an untyped nil, which the audit record leaves
// out.
func recordValue(read func() (auth.Record, error)) (any, error) {
	rec, err := read()
	if errors.Is(err, auth.ErrUnknown) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return auditValueOf(rec), nil
}

// busNamed reports whether the command line or the environment names a
// bus (--nats, NATS_URL): only then do the mints reach it.
func busNamed(cmd *cobra.Command) bool {
	return cmd.Flags().Changed("nats") || os.Getenv("NATS_URL") != ""
}

// authAudit is an auth command's way to the audit trail.
type authAudit struct {
	ctx  context.Context
	f    *kv.Fleet
	done func()
}

// openAudit connects to the bus for an auth command's audit record, as
// --creds or, without it, the directory's admin (creds/admin.creds, whose
// user name is then the actor), and refuses the write when the config
// requires a --reason that is missing. A bus that does not answer is
// reworded by unreachable.
func (o *AuthOptions) openAudit(ctx context.Context, command string, unreachable func(error) error) (*authAudit, error) {
	if o.Global.Creds == "" {
		admin := filepath.Join(o.Dir, auth.CredsFile(auth.UserAdmin))
		if _, err := os.Stat(admin); err == nil {
			o.Global.Creds = admin
		}
	}
	sctx, f, done, err := o.session(ctx)
	if err != nil {
		return nil, unreachable(err)
	}
	if err := o.checkReason(sctx, f, change{Command: command}); err != nil {
		done()
		return nil, err
	}
	return &authAudit{ctx: sctx, f: f, done: done}, nil
}

// recordAuth stores the audit record of an auth command's write to file
// (relative to the auth directory).
func (o *AuthOptions) recordAuth(a *authAudit, command, file string, before, after any) {
	o.record(a.ctx, a.f, auditBucket, file, change{Command: command, Before: before}, after, false, 0, 0)
}

// auditFailed reports a write (where: what was written) whose record could
// not be published, as recordAuth does when the publish fails.
func (o *AuthOptions) auditFailed(command, where string, err error) {
	ae := &AuditError{Command: command, Where: where, Err: err}
	fmt.Fprintf(o.Global.ErrOut, "error: %v\n", ae)
	if o.auditErr == nil {
		o.auditErr = ae
	}
}

// notRecorded says on stderr that a write left no audit record, and how the
// next one gets one.
func (o *AuthOptions) notRecorded(command, how string) {
	fmt.Fprintf(o.Global.ErrOut, "note: %s: no audit record written (%s)\n", command, how)
}

// mintOffline is how a mint gets an audit record.
const mintOffline = "it did not reach the bus: give --nats or NATS_URL, with admin creds (--creds, default <dir>/creds/admin.creds), to record mints in " + kv.StreamAudit

// mintOnBus explains a failure to reach the bus a mint was pointed at.
func mintOnBus(command string) func(error) error {
	return func(err error) error {
		return fmt.Errorf("%w; nothing minted: %s records the mint in %s when --nats or NATS_URL names the bus (to mint offline, without a record, set neither)",
			err, command, kv.StreamAudit)
	}
}

// recordMint records a mint the directory holds now (read returns its
// record), or says on stderr that it was not recorded (a is nil: off the
// bus).
func (o *AuthOptions) recordMint(a *authAudit, command string, read func() (auth.Record, error), before any) {
	if a == nil {
		o.notRecorded(command, mintOffline)
		return
	}
	rec, err := read()
	if err != nil {
		o.auditFailed(command, "the auth directory", fmt.Errorf("read back what was minted: %w", err))
		return
	}
	o.recordAuth(a, command, auth.RecordFile(rec), before, auditValueOf(rec))
}

// mintAuditHelp is what "auth agent" and "auth user" say of the audit trail.
const mintAuditHelp = `Audit trail: with --nats or NATS_URL naming the bus, the mint is recorded in
FLEET_AUDIT ('fleetctl history'): who (--actor, else the creds' user name),
why (--reason; required when the config says require_reason), and the
user's account, name, agent id, group, role and public keys before and
after (never a seed or a JWT). It connects first, as --creds or else
<dir>/creds/admin.creds, and mints nothing if the bus does not answer; a
record that is not stored is said on stderr and exits 1 (the creds are
written: do not mint again). Without --nats and NATS_URL it works offline
and says on stderr that nothing was recorded.`

// revokeTarget returns how to read the record of what "auth revoke"
// revokes: the agent's, the user's, or the one that lists --key
// (auth.ErrUnknown: a key the directory never issued).
func (o *AuthRevokeOptions) revokeTarget(d auth.Dir) func() (auth.Record, error) {
	switch {
	case o.ID != "":
		return func() (auth.Record, error) { return d.Agent(rollout.AgentID(o.ID)) }
	case o.User != "":
		return func() (auth.Record, error) { return d.User(o.User) }
	}
	return func() (auth.Record, error) {
		recs, err := d.Records()
		if err != nil {
			return auth.Record{}, err
		}
		for _, rec := range recs {
			for _, k := range rec.Keys {
				if k.UserKey == o.Key {
					return rec, nil
				}
			}
		}
		return auth.Record{}, auth.ErrUnknown
	}
}

// recordRevocation records a revocation the directory holds now: on the
// bus the push takes (a: nil when it did not answer, unreachable says
// why), or, with --push=false, says on stderr that it was not recorded.
func (o *AuthRevokeOptions) recordRevocation(a *authAudit, unreachable error, read func() (auth.Record, error), before any, revs []auth.Revocation) {
	const command = "auth revoke"
	if !o.Push {
		o.notRecorded(command, "--push=false does not reach the bus: revoke without it, with --nats, to push and record")
		return
	}
	var file string
	var after any
	rec, err := read()
	switch {
	case errors.Is(err, auth.ErrUnknown) && len(revs) == 1:
		// A key no record names, revoked in its account's JWT.
		file = revs[0].File
		before = &authAuditValue{Account: revs[0].Account}
		after = &authAuditValue{Account: revs[0].Account, Revoked: revs[0].Keys}
	case err != nil:
		o.auditFailed(command, "the auth directory", fmt.Errorf("read back what was revoked: %w", err))
		return
	default:
		file, after = auth.RecordFile(rec), auditValueOf(rec)
	}
	if a == nil {
		o.auditFailed(command, auditBucket+"/"+file, unreachable)
		return
	}
	o.recordAuth(a, command, file, before, after)
}
