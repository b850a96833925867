package auth

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Account names inside the operator.
const (
	// AccountFleet holds the stream and buckets, the controller and admins.
	AccountFleet = "FLEET"
	// AccountAgents holds one user per host and nothing but imports from
	// FLEET (AgentsImports): no reply subject an agent writes names anything
	// in FLEET.
	AccountAgents = "AGENTS"
	// AccountControl holds the controllers and nothing but imports from
	// FLEET (ControlImports): they write group statuses, stats, the lease
	// and events there, and can reach neither the spec nor the config.
	AccountControl = "CONTROL"
	// AccountEdge holds the edge sites' leaf users and nothing but imports
	// from FLEET (EdgeImports): heartbeats in, each site's plan deliveries
	// out, the reset and flow control of the sites' consumers.
	AccountEdge   = "EDGE"
	AccountSystem = "SYS"
)

// JetStreamLimits are the FLEET account's JetStream limits; -1 is unlimited.
type JetStreamLimits struct {
	MemoryBytes int64
	DiskBytes   int64
	Streams     int64
	Consumers   int64
}

// DefaultJetStreamLimits fit a fleet of tens of thousands of agents: the
// heartbeat stream holds one small message per agent, the buckets a few
// keys per group, and only controllers and fleetctl create consumers.
var DefaultJetStreamLimits = JetStreamLimits{MemoryBytes: 256 << 20, DiskBytes: 10 << 30, Streams: 32, Consumers: -1}

// Operator is a freshly minted trust root: the operator, the system account,
// the FLEET, AGENTS, CONTROL and EDGE accounts, each with an identity key and a
// signing key where day-to-day signing happens, so identity keys can be kept
// offline.
type Operator struct {
	OperatorKey, OperatorSigner nkeys.KeyPair
	SystemKey                   nkeys.KeyPair
	FleetKey, FleetSigner       nkeys.KeyPair
	AgentsKey, AgentsSigner     nkeys.KeyPair
	ControlKey, ControlSigner   nkeys.KeyPair
	EdgeKey, EdgeSigner         nkeys.KeyPair

	OperatorJWT, SystemJWT, FleetJWT, AgentsJWT, ControlJWT, EdgeJWT string
}

// NewOperator mints an operator named name, its system account, the FLEET
// account with JetStream limits js, and the AGENTS, CONTROL and EDGE accounts.
func NewOperator(name string, js JetStreamLimits) (*Operator, error) {
	o := &Operator{}
	var err error
	for _, k := range []struct {
		dst    *nkeys.KeyPair
		create func() (nkeys.KeyPair, error)
	}{
		{&o.OperatorKey, nkeys.CreateOperator}, {&o.OperatorSigner, nkeys.CreateOperator},
		{&o.SystemKey, nkeys.CreateAccount},
		{&o.FleetKey, nkeys.CreateAccount}, {&o.FleetSigner, nkeys.CreateAccount},
		{&o.AgentsKey, nkeys.CreateAccount}, {&o.AgentsSigner, nkeys.CreateAccount},
		{&o.ControlKey, nkeys.CreateAccount}, {&o.ControlSigner, nkeys.CreateAccount},
		{&o.EdgeKey, nkeys.CreateAccount}, {&o.EdgeSigner, nkeys.CreateAccount},
	} {
		if *k.dst, err = k.create(); err != nil {
			return nil, fmt.Errorf("new key: %w", err)
		}
	}
	opPub, sysPub, fleetPub := pub(o.OperatorKey), pub(o.SystemKey), pub(o.FleetKey)

	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = name
	oc.SystemAccount = sysPub
	oc.SigningKeys.Add(pub(o.OperatorSigner))
	if o.OperatorJWT, err = oc.Encode(o.OperatorKey); err != nil {
		return nil, fmt.Errorf("operator jwt: %w", err)
	}

	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = AccountSystem
	if o.SystemJWT, err = sc.Encode(o.OperatorSigner); err != nil {
		return nil, fmt.Errorf("system account jwt: %w", err)
	}

	fc := jwt.NewAccountClaims(fleetPub)
	fc.Name = AccountFleet
	fc.Limits.JetStreamLimits = jwt.JetStreamLimits{
		MemoryStorage: js.MemoryBytes, DiskStorage: js.DiskBytes, Streams: js.Streams, Consumer: js.Consumers,
	}
	fc.SigningKeys.Add(pub(o.FleetSigner))
	fc.Exports = FleetExports()
	if o.FleetJWT, err = encodeAccount(fc, o.OperatorSigner); err != nil {
		return nil, err
	}
	if o.AgentsJWT, err = encodeAccount(ImportingAccount(AccountAgents, pub(o.AgentsKey), pub(o.AgentsSigner), fleetPub), o.OperatorSigner); err != nil {
		return nil, err
	}
	if o.ControlJWT, err = encodeAccount(ImportingAccount(AccountControl, pub(o.ControlKey), pub(o.ControlSigner), fleetPub), o.OperatorSigner); err != nil {
		return nil, err
	}
	if o.EdgeJWT, err = encodeAccount(ImportingAccount(AccountEdge, pub(o.EdgeKey), pub(o.EdgeSigner), fleetPub), o.OperatorSigner); err != nil {
		return nil, err
	}
	return o, nil
}

// ImportingAccount is the AGENTS, CONTROL or EDGE account: no JetStream, no
// exports, its imports from the FLEET account fleet, users signed by signer.
func ImportingAccount(name, account, signer, fleet string) *jwt.AccountClaims {
	ac := jwt.NewAccountClaims(account)
	ac.Name = name
	ac.SigningKeys.Add(signer)
	ac.Imports = importsOf(name, fleet)
	return ac
}

// importsOf are the imports of the importing account name (AGENTS,
// CONTROL or EDGE) from the FLEET account fleet.
func importsOf(name, fleet string) jwt.Imports {
	switch name {
	case AccountAgents:
		return AgentsImports(fleet)
	case AccountControl:
		return ControlImports(fleet)
	case AccountEdge:
		return EdgeImports(fleet)
	}
	return nil
}

// encodeAccount validates and signs an account JWT.
func encodeAccount(ac *jwt.AccountClaims, signer nkeys.KeyPair) (string, error) {
	vr := jwt.CreateValidationResults()
	ac.Validate(vr)
	if errs := vr.Errors(); len(errs) > 0 {
		return "", fmt.Errorf("%s account jwt: %v", ac.Name, errs[0])
	}
	token, err := ac.Encode(signer)
	if err != nil {
		return "", fmt.Errorf("%s account jwt: %w", ac.Name, err)
	}
	return token, nil
}

// User is a minted user: the creds file's contents (JWT and seed) and the
// user's public key, which revocations name.
type User struct {
	Name     string
	Role     Role
	PubKey   string
	JWT      string
	Creds    []byte // secret: holds the seed
	IssuedAt time.Time
}

// Issuer signs users of one account.
type Issuer struct {
	// Account is the account's public (identity) key.
	Account string
	// Signer is the account's signing key, or its identity key (the system
	// account has no separate signing key).
	Signer nkeys.KeyPair
}

// Agent mints the credentials of agent id in group: AgentPermissions, client
// connections only, a few subscriptions, heartbeat-sized payloads.
func (is Issuer) Agent(id rollout.AgentID, group string) (User, error) {
	return is.AgentApps(id, group, AppGrant{})
}

// AgentApps mints the credentials of agent id in group for the apps of g
// (AgentAppPermissions); the zero AppGrant is Agent's, claim for claim.
func (is Issuer) AgentApps(id rollout.AgentID, group string, g AppGrant) (User, error) {
	if _, err := rollout.ParseAgentID(string(id)); err != nil {
		return User{}, err
	}
	if err := rollout.ValidateGroupName(group); err != nil {
		return User{}, err
	}
	if err := g.Validate(); err != nil {
		return User{}, err
	}
	return is.user("agent-"+string(id), RoleAgent, func(u *jwt.UserClaims) {
		u.Permissions = AgentAppPermissions(id, group, g)
		u.Limits.Subs = agentSubs(g)
		u.Limits.Payload = agentMaxPayload
		u.Tags.Add("group:"+group, "agent:"+string(id))
		if !g.DefaultOnly() {
			u.Tags.Add("apps:" + g.String())
		}
		if len(g.Join) > 0 {
			u.Tags.Add("join:" + strings.Join(g.Join, ","))
		}
	})
}

// User mints a user named name with role's grants.
func (is Issuer) User(name string, role Role) (User, error) {
	return is.user(name, role, func(u *jwt.UserClaims) { u.Permissions = RolePermissions(role) })
}

func (is Issuer) user(name string, role Role, set func(*jwt.UserClaims)) (User, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return User{}, fmt.Errorf("new user key: %w", err)
	}
	uc := jwt.NewUserClaims(pub(kp))
	uc.Name = name
	if signer := pub(is.Signer); signer != is.Account {
		uc.IssuerAccount = is.Account
	}
	uc.AllowedConnectionTypes.Add(connectionTypes(role)...)
	uc.Tags.Add("role:" + string(role))
	set(uc)
	vr := jwt.CreateValidationResults()
	uc.Validate(vr)
	if errs := vr.Errors(); len(errs) > 0 {
		return User{}, fmt.Errorf("user %s: %v", name, errs[0])
	}
	token, err := uc.Encode(is.Signer)
	if err != nil {
		return User{}, fmt.Errorf("user %s jwt: %w", name, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return User{}, err
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return User{}, err
	}
	// Decode what was signed, for the issue time the server compares
	// revocations against.
	back, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return User{}, err
	}
	return User{Name: name, Role: role, PubKey: uc.Subject, JWT: token, Creds: creds, IssuedAt: time.Unix(back.IssuedAt, 0).UTC()}, nil
}

// Revoke returns accountJWT re-signed by signer (an operator key the
// operator JWT trusts) with every JWT of keys issued up to at revoked.
func Revoke(accountJWT string, signer nkeys.KeyPair, keys []string, at time.Time) (string, error) {
	ac, err := jwt.DecodeAccountClaims(accountJWT)
	if err != nil {
		return "", fmt.Errorf("account jwt: %w", err)
	}
	for _, k := range keys {
		if !nkeys.IsValidPublicUserKey(k) {
			return "", fmt.Errorf("revoke %q: not a user public key (U…)", k)
		}
		ac.RevokeAt(k, at)
	}
	return ac.Encode(signer)
}

func pub(kp nkeys.KeyPair) string {
	p, err := kp.PublicKey()
	if err != nil {
		// Only a wiped key pair fails; ours are fresh or parsed from seeds.
		panic(fmt.Sprintf("nkeys: public key: %v", err))
	}
	return p
}
