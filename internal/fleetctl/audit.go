package fleetctl

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"strings"

	"github.com/nats-io/jwt/v2"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// Every write fleetctl makes to the fleet's buckets is recorded in the audit
// trail (FLEET_AUDIT, docs/bus.md): who, why, what changed and when. The
// record is published with a JetStream ack once the write succeeded. If the
// write succeeded but the record was not stored, the write stays (it cannot
// be taken back safely: the controller may already act on it), the command
// says so on stderr at once, and exits 1 after its normal output: a script
// must notice that its change is missing from the trail, and the message
// says the change itself was made, so nobody repeats it.

// change says what a write is, for its audit record.
type change struct {
	// Command is the command without "fleetctl": "plan set", "pause".
	Command string
	// Group is the group whose status is written; empty for fleet-wide.
	Group string
	// Before is the value read (nil: none).
	Before any
}

// checkReason refuses a write without a reason when the stored config says
// require_reason. A config that cannot be read requires nothing: the
// command that reads it reports that.
func (g *Global) checkReason(ctx context.Context, f *kv.Fleet, ch change) error {
	if strings.TrimSpace(g.Reason) != "" {
		return nil
	}
	cfg, _, err := f.ReadConfig(ctx)
	if err != nil || !cfg.Value.RequireReason {
		return nil
	}
	return cliutil.Usagef("%s: the config requires a reason for every change (require_reason): give --reason \"why\"; nothing written", ch.Command)
}

// AuditError is a write that was made but not recorded in the audit trail.
type AuditError struct {
	Command string
	Where   string
	Err     error
}

func (e *AuditError) Error() string {
	return fmt.Sprintf("%s: %s was written, but the audit record was NOT stored: %v (the change stands; do not repeat it)", e.Command, e.Where, e.Err)
}

func (e *AuditError) Unwrap() error { return e.Err }

// actor is who the audit records name: --actor, else the NATS user's name
// in the credentials file, else $USER@hostname. A label for people, not a
// proof: the credentials' signature is what the server checks.
func (g *Global) actor() string {
	if g.Actor != "" {
		return g.Actor
	}
	if name := credsUserName(g.Creds); name != "" {
		return name
	}
	u := os.Getenv("USER")
	if u == "" {
		if cu, err := user.Current(); err == nil {
			u = cu.Username
		}
	}
	if u == "" {
		u = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return u + "@" + host
}

// credsUserName is the name in the user JWT of a creds file; "" when the
// file has none or cannot be read (connecting reports that).
func credsUserName(path string) string {
	if path == "" {
		return ""
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	token, err := jwt.ParseDecoratedJWT(data)
	if err != nil {
		return ""
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return ""
	}
	return claims.Name
}

// record stores the audit record of a write that was made. A failure is
// said on stderr at once and kept for the exit status (Global.AuditErr).
func (g *Global) record(ctx context.Context, f *kv.Fleet, bucket, key string, ch change, after any, deleted bool, rev, prev uint64) {
	r := kv.AuditRecord{V: 1, At: g.Now().UTC(), Actor: g.actor(), Reason: g.Reason, Command: ch.Command,
		Group: ch.Group, Bucket: bucket, Key: key, Revision: rev, PreviousRevision: prev, Deleted: deleted}
	if r.Command == "" {
		r.Command = "write"
	}
	if bucket == kv.BucketPlan {
		r.App = g.appName
	}
	if ch.Before != nil {
		r.Before = marshal(ch.Before)
	}
	if after != nil && !deleted {
		r.After = marshal(after)
	}
	r.Diff = kv.JSONDiff(r.Before, r.After)
	err := f.PublishAudit(ctx, r)
	if err == nil {
		return
	}
	ae := &AuditError{Command: r.Command, Where: bucket + "/" + key, Err: g.refused("publish "+kv.AuditSubject(r.Group), err)}
	fmt.Fprintf(g.ErrOut, "error: %v\n", ae)
	if g.auditErr == nil {
		g.auditErr = ae
	}
}

func marshal(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return data
}

// AuditErr is the first write of this command that was not recorded in the
// audit trail, nil when every write was.
func (g *Global) AuditErr() error { return g.auditErr }
