package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The layout of an auth directory. Public files are 0644, everything under
// keys/, creds/ and the agents' .creds files 0600.
const (
	FileResolverConf = "resolver.conf"      // include for every nats-server config
	FileAccountConf  = "fleet-account.conf" // FLEET_ACCOUNT, for leaf node remotes
	FileOperatorJWT  = "operator.jwt"
	FileSystemJWT    = "accounts/SYS.jwt"
	FileFleetJWT     = "accounts/FLEET.jwt"
	FileAgentsJWT    = "accounts/AGENTS.jwt"
	FileControlJWT   = "accounts/CONTROL.jwt"
	FileEdgeJWT      = "accounts/EDGE.jwt"

	// Identity seeds: needed by nothing after init. Keep them offline.
	FileOperatorSeed = "keys/operator.nk"
	FileSystemSeed   = "keys/SYS.nk"
	FileFleetSeed    = "keys/FLEET.nk"
	FileAgentsSeed   = "keys/AGENTS.nk"
	FileControlSeed  = "keys/CONTROL.nk"
	FileEdgeSeed     = "keys/EDGE.nk"
	// Signing seeds: "auth revoke" and "auth upgrade" need the operator's,
	// "auth user" the FLEET account's (the CONTROL account's for a
	// controller), "auth agent" the AGENTS account's, "edge add" the EDGE
	// account's.
	FileOperatorSigningSeed = "keys/operator-signing.nk"
	FileFleetSigningSeed    = "keys/FLEET-signing.nk"
	FileAgentsSigningSeed   = "keys/AGENTS-signing.nk"
	FileControlSigningSeed  = "keys/CONTROL-signing.nk"
	FileEdgeSigningSeed     = "keys/EDGE-signing.nk"
)

// Seeds of the accounts that hold users: the identity seed, and the seed
// that signs the account's users.
var (
	identitySeedFile = map[string]string{
		AccountFleet:   FileFleetSeed,
		AccountAgents:  FileAgentsSeed,
		AccountControl: FileControlSeed,
		AccountEdge:    FileEdgeSeed,
	}
	signingSeedFile = map[string]string{
		AccountFleet:   FileFleetSigningSeed,
		AccountAgents:  FileAgentsSigningSeed,
		AccountControl: FileControlSigningSeed,
		AccountEdge:    FileEdgeSigningSeed,
	}
)

// AccountFiles are where an auth directory keeps an account's JWT and the seed
// that signs its users (FLEET, AGENTS, CONTROL or EDGE).
func AccountFiles(account string) (jwtFile, signingSeed string) {
	return accountJWTFile[account], signingSeedFile[account]
}

// importing are the accounts that hold nothing but imports from FLEET, in
// the order resolver.conf lists them. A directory minted before they
// existed lacks them ("auth upgrade").
var importing = []string{AccountAgents, AccountControl, AccountEdge}

// accountJWTFile is where each account's JWT is kept.
var accountJWTFile = map[string]string{
	AccountSystem:  FileSystemJWT,
	AccountFleet:   FileFleetJWT,
	AccountAgents:  FileAgentsJWT,
	AccountControl: FileControlJWT,
	AccountEdge:    FileEdgeJWT,
}

// CredsFile is where a named user's creds are written (creds/<name>.creds).
func CredsFile(name string) string { return filepath.Join("creds", name+".creds") }

// AgentCredsFile is where an agent's creds are written (agents/<id>.creds).
func AgentCredsFile(id rollout.AgentID) string {
	return filepath.Join("agents", string(id)+".creds")
}

func agentRecordFile(id rollout.AgentID) string { return filepath.Join("agents", string(id)+".json") }
func userRecordFile(name string) string         { return filepath.Join("users", name+".json") }

// Users auth init mints.
const (
	UserController = "controller"
	UserAdmin      = "admin"
	UserSystem     = "sys"
)

// Record is what the directory remembers of a user or an agent: every key
// ever issued to it, so "auth revoke" can name them all.
type Record struct {
	V       int    `json:"v"`
	Name    string `json:"name"`
	Role    Role   `json:"role"`
	Account string `json:"account"`
	AgentID string `json:"agent_id,omitempty"`
	Group   string `json:"group,omitempty"`
	// Apps are the apps an agent's current key speaks for; nil is the
	// fleet's default app only (every agent minted before apps existed).
	Apps *AppGrant `json:"apps,omitempty"`
	// Site is an edge site's, for its leaf user.
	Site string `json:"site,omitempty"`
	// Keys in the order issued: the last is the current one.
	Keys []KeyRecord `json:"keys"`
}

// KeyRecord is one issued user key.
type KeyRecord struct {
	UserKey string `json:"user_key"`
	// Account is the key's account when it differs from the record's: an
	// agent or a controller minted into FLEET before the AGENTS and CONTROL
	// accounts existed.
	Account   string    `json:"account,omitempty"`
	IssuedAt  time.Time `json:"issued_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// keyAccount is the account key k of rec lives in.
func (rec Record) keyAccount(k KeyRecord) string {
	if k.Account != "" {
		return k.Account
	}
	return rec.Account
}

// Dir is an auth directory.
type Dir struct{ Path string }

func (d Dir) path(name string) string { return filepath.Join(d.Path, name) }

func (d Dir) read(name string) ([]byte, error) {
	b, err := os.ReadFile(d.path(name))
	if err != nil {
		return nil, fmt.Errorf("auth dir %s: %w", d.Path, err)
	}
	return b, nil
}

// InitResult says what Init minted (public keys only).
type InitResult struct {
	Operator, SystemAccount, FleetAccount, AgentsAccount, ControlAccount, EdgeAccount string
	Files                                                                             []string
}

// Init mints an operator, the SYS, FLEET, AGENTS, CONTROL and EDGE accounts and
// the controller, admin and sys users into an empty directory. It refuses to
// overwrite an existing operator (ErrExists).
func (d Dir) Init(name string, js JetStreamLimits) (InitResult, error) {
	if _, err := os.Stat(d.path(FileOperatorJWT)); err == nil {
		return InitResult{}, fmt.Errorf("%s: %w: %s exists; a new operator would lock out every credential issued so far",
			d.Path, ErrExists, FileOperatorJWT)
	}
	op, err := NewOperator(name, js)
	if err != nil {
		return InitResult{}, err
	}
	var files []File
	for _, k := range []struct {
		name string
		kp   nkeys.KeyPair
	}{
		{FileOperatorSeed, op.OperatorKey}, {FileOperatorSigningSeed, op.OperatorSigner},
		{FileSystemSeed, op.SystemKey}, {FileFleetSeed, op.FleetKey}, {FileFleetSigningSeed, op.FleetSigner},
		{FileAgentsSeed, op.AgentsKey}, {FileAgentsSigningSeed, op.AgentsSigner},
		{FileControlSeed, op.ControlKey}, {FileControlSigningSeed, op.ControlSigner},
		{FileEdgeSeed, op.EdgeKey}, {FileEdgeSigningSeed, op.EdgeSigner},
	} {
		seed, err := k.kp.Seed()
		if err != nil {
			return InitResult{}, err
		}
		files = append(files, File{Name: k.name, Data: append(seed, '\n'), Secret: true})
	}
	files = append(files,
		File{Name: FileOperatorJWT, Data: []byte(op.OperatorJWT + "\n")},
		File{Name: FileSystemJWT, Data: []byte(op.SystemJWT + "\n")},
		File{Name: FileFleetJWT, Data: []byte(op.FleetJWT + "\n")},
		File{Name: FileAgentsJWT, Data: []byte(op.AgentsJWT + "\n")},
		File{Name: FileControlJWT, Data: []byte(op.ControlJWT + "\n")},
		File{Name: FileEdgeJWT, Data: []byte(op.EdgeJWT + "\n")},
	)
	conf, err := ResolverConf(op.OperatorJWT, op.SystemJWT, op.FleetJWT, op.AgentsJWT, op.ControlJWT, op.EdgeJWT)
	if err != nil {
		return InitResult{}, err
	}
	acc, err := AccountConf(op.FleetJWT)
	if err != nil {
		return InitResult{}, err
	}
	files = append(files, File{Name: FileResolverConf, Data: conf}, File{Name: FileAccountConf, Data: acc})

	fleet := Issuer{Account: pub(op.FleetKey), Signer: op.FleetSigner}
	control := Issuer{Account: pub(op.ControlKey), Signer: op.ControlSigner}
	system := Issuer{Account: pub(op.SystemKey), Signer: op.SystemKey}
	for _, u := range []struct {
		name string
		role Role
		is   Issuer
		acc  string
	}{
		{UserController, RoleController, control, AccountControl},
		{UserAdmin, RoleAdmin, fleet, AccountFleet},
		{UserSystem, RoleAdmin, system, AccountSystem},
	} {
		user, err := u.is.User(u.name, u.role)
		if err != nil {
			return InitResult{}, err
		}
		rec := Record{V: 1, Name: u.name, Role: u.role, Account: u.acc}
		rec.Keys = append(rec.Keys, KeyRecord{UserKey: user.PubKey, IssuedAt: user.IssuedAt})
		data, err := encodeRecord(rec)
		if err != nil {
			return InitResult{}, err
		}
		files = append(files, File{Name: CredsFile(u.name), Data: user.Creds, Secret: true},
			File{Name: userRecordFile(u.name), Data: data})
	}
	// The operator JWT goes last: its presence marks a complete init.
	slices.SortStableFunc(files, func(a, b File) int {
		switch {
		case a.Name == FileOperatorJWT:
			return 1
		case b.Name == FileOperatorJWT:
			return -1
		}
		return 0
	})
	if err := WriteFiles(d.Path, files...); err != nil {
		return InitResult{}, err
	}
	res := InitResult{Operator: pub(op.OperatorKey), SystemAccount: pub(op.SystemKey), FleetAccount: pub(op.FleetKey),
		AgentsAccount: pub(op.AgentsKey), ControlAccount: pub(op.ControlKey), EdgeAccount: pub(op.EdgeKey)}
	for _, f := range files {
		res.Files = append(res.Files, f.Name)
	}
	return res, nil
}

// issuer loads an account's public key and its signing key.
func (d Dir) issuer(account string) (Issuer, error) {
	seedFile := signingSeedFile[account]
	ac, err := d.account(account)
	if err != nil {
		return Issuer{}, err
	}
	kp, err := d.seed(seedFile)
	if err != nil {
		return Issuer{}, err
	}
	if !ac.SigningKeys.Contains(pub(kp)) {
		return Issuer{}, fmt.Errorf("%s is not a signing key of the %s account in %s", seedFile, account, accountJWTFile[account])
	}
	return Issuer{Account: ac.Subject, Signer: kp}, nil
}

// account reads and decodes an account's JWT. A directory minted before
// the AGENTS, CONTROL or EDGE account existed says how to upgrade.
func (d Dir) account(name string) (*jwt.AccountClaims, error) {
	file := accountJWTFile[name]
	token, err := os.ReadFile(d.path(file))
	if errors.Is(err, fs.ErrNotExist) && slices.Contains(importing, name) {
		if _, ferr := os.Stat(d.path(FileFleetJWT)); ferr == nil {
			why := "agents and controllers lived in FLEET, where their replies could name the buckets"
			if name == AccountEdge {
				why = "edge sites' leaf users lived in FLEET, with all of its JetStream API"
			}
			return nil, fmt.Errorf("%w: %s predates the %s account (%s); run 'fleetctl auth upgrade --dir %s' (docs/security.md, \"Upgrading\")",
				ErrLegacy, d.Path, name, why, d.Path)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("auth dir %s: %w", d.Path, err)
	}
	ac, err := jwt.DecodeAccountClaims(string(bytes.TrimSpace(token)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return ac, nil
}

func (d Dir) seed(name string) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(d.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s is not in %s (bring it back from where it is kept offline)", ErrNoKey, name, d.Path)
	}
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
	if err != nil {
		return nil, fmt.Errorf("%s: not an nkey seed", name) // never echo the content
	}
	return kp, nil
}

// IssueAgent mints credentials for agent id in group, for the fleet's
// default app, and writes them to out (default agents/<id>.creds). Issuing
// again for the same id (a new group, or a rotation) adds a key to the
// agent's record; the old key stays valid until revoked ("auth revoke --id
// ID --keep-current").
func (d Dir) IssueAgent(id rollout.AgentID, group, out string) (User, string, error) {
	return d.IssueAgentApps(id, group, AppGrant{}, out)
}

// IssueAgentApps is IssueAgent for the apps of g (AgentAppPermissions); the
// record keeps g, so that an upgrade re-minting the agent grants the same.
func (d Dir) IssueAgentApps(id rollout.AgentID, group string, g AppGrant, out string) (User, string, error) {
	is, err := d.issuer(AccountAgents)
	if err != nil {
		return User{}, "", err
	}
	u, err := is.AgentApps(id, group, g)
	if err != nil {
		return User{}, "", err
	}
	rec, err := d.loadRecord(agentRecordFile(id))
	if errors.Is(err, ErrUnknown) {
		rec, err = Record{V: 1, Name: u.Name, Role: RoleAgent, Account: AccountAgents, AgentID: string(id)}, nil
	}
	if err != nil {
		return User{}, "", err
	}
	rec.moveTo(AccountAgents)
	rec.Group = group
	rec.Apps = nil
	if !g.Plain() {
		rec.Apps = &g
	}
	if out == "" {
		out = AgentCredsFile(id)
	}
	return u, out, d.saveIssued(rec, agentRecordFile(id), u, out)
}

// UserAccount is the account a user of role lives in: CONTROL for a
// controller, EDGE for a leaf node, FLEET for an admin.
func UserAccount(role Role) string {
	switch role {
	case RoleController:
		return AccountControl
	case RoleLeaf:
		return AccountEdge
	}
	return AccountFleet
}

// IssueUser mints another user with role (a second controller, an admin
// per person) in its account (UserAccount), written to out (default
// creds/<name>.creds). A leaf user is one site's: IssueEdge.
func (d Dir) IssueUser(name string, role Role, out string) (User, string, error) {
	if !namePattern(name) {
		return User{}, "", fmt.Errorf("user name %q: use 1-64 of a-z 0-9 - _", name)
	}
	if role == RoleLeaf {
		return User{}, "", fmt.Errorf("user %s: %w: IssueEdge ('fleetctl edge add --site NAME')", name, ErrEdgeRole)
	}
	acc := UserAccount(role)
	is, err := d.issuer(acc)
	if err != nil {
		return User{}, "", err
	}
	u, err := is.User(name, role)
	if err != nil {
		return User{}, "", err
	}
	rec, err := d.loadRecord(userRecordFile(name))
	switch {
	case errors.Is(err, ErrUnknown):
		rec = Record{V: 1, Name: name, Role: role, Account: acc}
	case err != nil:
		return User{}, "", err
	case rec.Account == AccountSystem:
		return User{}, "", fmt.Errorf("user %q belongs to the %s account; pick another name", name, rec.Account)
	}
	rec.moveTo(acc)
	rec.Role = role
	if out == "" {
		out = CredsFile(name)
	}
	return u, out, d.saveIssued(rec, userRecordFile(name), u, out)
}

func namePattern(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// moveTo makes account the record's account, pinning every earlier key to
// the account it was issued in.
func (rec *Record) moveTo(account string) {
	if rec.Account == account {
		return
	}
	for i := range rec.Keys {
		rec.Keys[i].Account = rec.keyAccount(rec.Keys[i])
	}
	rec.Account = account
}

func (d Dir) saveIssued(rec Record, recFile string, u User, out string) error {
	rec.Keys = append(rec.Keys, KeyRecord{UserKey: u.PubKey, IssuedAt: u.IssuedAt})
	data, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	// Creds first: a record never names a key whose creds were lost.
	return WriteFiles(d.Path, File{Name: out, Data: u.Creds, Secret: true}, File{Name: recFile, Data: data})
}

func encodeRecord(r Record) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	return append(b, '\n'), err
}

func (d Dir) loadRecord(name string) (Record, error) {
	b, err := os.ReadFile(d.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, fmt.Errorf("%w of %s in %s", ErrUnknown, name, d.Path)
	}
	if err != nil {
		return Record{}, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

// Agent returns an agent's record.
func (d Dir) Agent(id rollout.AgentID) (Record, error) { return d.loadRecord(agentRecordFile(id)) }

// User returns a named user's record.
func (d Dir) User(name string) (Record, error) { return d.loadRecord(userRecordFile(name)) }

// RecordFile is where the directory keeps rec (agents/<id>.json,
// users/<name>.json), relative to it.
func RecordFile(rec Record) string {
	if rec.AgentID != "" {
		return agentRecordFile(rollout.AgentID(rec.AgentID))
	}
	return userRecordFile(rec.Name)
}

// Records lists every agent and user record, users first.
func (d Dir) Records() ([]Record, error) {
	var out []Record
	for _, sub := range []string{"users", "agents"} {
		names, err := filepath.Glob(filepath.Join(d.Path, sub, "*.json"))
		if err != nil {
			return nil, err
		}
		slices.Sort(names)
		for _, n := range names {
			rel, _ := filepath.Rel(d.Path, n)
			r, err := d.loadRecord(rel)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// Revocation is the result of a revoke in one account: the re-signed
// account JWT to push to running servers, and the keys it revokes.
type Revocation struct {
	Account    string // SYS, FLEET, AGENTS, CONTROL or EDGE
	File       string // the account JWT's file in the directory
	AccountJWT string
	Keys       []string
}

// RevokeAgent revokes every key ever issued to agent id, or every key but
// the newest with keepCurrent (the end of a rotation). Keys issued before
// "auth upgrade" live in FLEET, later ones in AGENTS: one Revocation per
// account touched.
func (d Dir) RevokeAgent(id rollout.AgentID, keepCurrent bool, now time.Time) ([]Revocation, error) {
	return d.revokeRecord(agentRecordFile(id), keepCurrent, now)
}

// RevokeUser revokes a named user's keys, like RevokeAgent.
func (d Dir) RevokeUser(name string, keepCurrent bool, now time.Time) ([]Revocation, error) {
	return d.revokeRecord(userRecordFile(name), keepCurrent, now)
}

func (d Dir) revokeRecord(recFile string, keepCurrent bool, now time.Time) ([]Revocation, error) {
	rec, err := d.loadRecord(recFile)
	if err != nil {
		return nil, err
	}
	byAccount := map[string][]string{}
	var accounts []string
	for i := range rec.Keys {
		if keepCurrent && i == len(rec.Keys)-1 {
			break
		}
		acc := rec.keyAccount(rec.Keys[i])
		if _, ok := byAccount[acc]; !ok {
			accounts = append(accounts, acc)
		}
		byAccount[acc] = append(byAccount[acc], rec.Keys[i].UserKey)
		if rec.Keys[i].RevokedAt.IsZero() {
			rec.Keys[i].RevokedAt = now.UTC().Truncate(time.Second)
		}
	}
	if len(accounts) == 0 {
		return nil, fmt.Errorf("%s has only its current key; nothing to revoke with --keep-current", rec.Name)
	}
	var revs []Revocation
	for _, acc := range accounts {
		rev, err := d.RevokeKeys(acc, byAccount[acc], now)
		if err != nil {
			return nil, err
		}
		revs = append(revs, rev)
	}
	data, err := encodeRecord(rec)
	if err != nil {
		return nil, err
	}
	return revs, WriteFiles(d.Path, File{Name: recFile, Data: data})
}

// RevokeKeys revokes user keys of account (SYS, FLEET, AGENTS, CONTROL, EDGE) issued up
// to now: it re-signs the account JWT with the operator's signing key and
// rewrites it and resolver.conf. Running servers learn of it when the JWT
// is pushed.
func (d Dir) RevokeKeys(account string, keys []string, now time.Time) (Revocation, error) {
	accFile, ok := accountJWTFile[account]
	if !ok {
		return Revocation{}, fmt.Errorf("account %q: want %s, %s, %s, %s or %s", account, AccountFleet, AccountAgents, AccountControl, AccountEdge, AccountSystem)
	}
	signer, err := d.seed(FileOperatorSigningSeed)
	if err != nil {
		return Revocation{}, err
	}
	token, err := d.read(accFile)
	if err != nil {
		return Revocation{}, err
	}
	updated, err := Revoke(string(bytes.TrimSpace(token)), signer, keys, now)
	if err != nil {
		return Revocation{}, err
	}
	if err := d.writeAccounts(map[string]string{account: updated}); err != nil {
		return Revocation{}, err
	}
	return Revocation{Account: account, File: accFile, AccountJWT: updated, Keys: keys}, nil
}

// writeAccounts writes updated account JWTs (by account name) and
// resolver.conf with every account the directory holds.
func (d Dir) writeAccounts(updated map[string]string) error {
	op, err := d.read(FileOperatorJWT)
	if err != nil {
		return err
	}
	var files []File
	var tokens []string
	for _, acc := range []string{AccountSystem, AccountFleet, AccountAgents, AccountControl, AccountEdge} {
		token, ok := updated[acc]
		if ok {
			files = append(files, File{Name: accountJWTFile[acc], Data: []byte(token + "\n")})
		} else {
			b, err := os.ReadFile(d.path(accountJWTFile[acc]))
			if errors.Is(err, fs.ErrNotExist) && slices.Contains(importing, acc) {
				continue // a directory from before the account existed
			}
			if err != nil {
				return fmt.Errorf("auth dir %s: %w", d.Path, err)
			}
			token = string(bytes.TrimSpace(b))
		}
		tokens = append(tokens, token)
	}
	conf, err := ResolverConf(string(bytes.TrimSpace(op)), tokens...)
	if err != nil {
		return err
	}
	return WriteFiles(d.Path, append(files, File{Name: FileResolverConf, Data: conf})...)
}

// RevokeKey revokes one user key: of the agent or user whose record lists
// it (marking it there), or, unknown to this directory, of the FLEET account.
func (d Dir) RevokeKey(key string, now time.Time) (Revocation, error) {
	recs, err := d.Records()
	if err != nil {
		return Revocation{}, err
	}
	for _, rec := range recs {
		for i := range rec.Keys {
			if rec.Keys[i].UserKey != key {
				continue
			}
			rev, err := d.RevokeKeys(rec.keyAccount(rec.Keys[i]), []string{key}, now)
			if err != nil {
				return Revocation{}, err
			}
			if rec.Keys[i].RevokedAt.IsZero() {
				rec.Keys[i].RevokedAt = now.UTC().Truncate(time.Second)
			}
			data, err := encodeRecord(rec)
			if err != nil {
				return Revocation{}, err
			}
			file := userRecordFile(rec.Name)
			if rec.AgentID != "" {
				file = agentRecordFile(rollout.AgentID(rec.AgentID))
			}
			return rev, WriteFiles(d.Path, File{Name: file, Data: data})
		}
	}
	return d.RevokeKeys(AccountFleet, []string{key}, now)
}

// AccountJWTs are the directory's account JWTs (FLEET first: the others
// import from it; SYS last), for pushing.
func (d Dir) AccountJWTs() ([]string, error) {
	var out []string
	for _, acc := range []string{AccountFleet, AccountAgents, AccountControl, AccountEdge, AccountSystem} {
		b, err := os.ReadFile(d.path(accountJWTFile[acc]))
		if errors.Is(err, fs.ErrNotExist) && slices.Contains(importing, acc) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("auth dir %s: %w", d.Path, err)
		}
		out = append(out, string(bytes.TrimSpace(b)))
	}
	return out, nil
}
