package auth

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
)

// claimUpdateResponse is nats-server's answer to a claims update
// (server.ServerAPIClaimUpdateResponse, which fleetctl must not import).
type claimUpdateResponse struct {
	Server struct {
		Name string `json:"name"`
	} `json:"server"`
	Data *struct {
		Account string `json:"account"`
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"data,omitempty"`
	Error *struct {
		Account     string `json:"account"`
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error,omitempty"`
}

// Push sends an updated account JWT to the running servers over a
// system-account connection ($SYS.REQ.ACCOUNT.<id>.CLAIMS.UPDATE, which
// memory and directory resolvers both answer). Every server of the cluster
// receives it; the first answer is returned. Clients whose user JWT the
// update revokes are disconnected at once.
func Push(ctx context.Context, nc *nats.Conn, accountJWT string) (server string, err error) {
	ac, err := jwt.DecodeAccountClaims(accountJWT)
	if err != nil {
		return "", fmt.Errorf("account jwt: %w", err)
	}
	subj := fmt.Sprintf("$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE", ac.Subject)
	msg, err := nc.RequestWithContext(ctx, subj, []byte(accountJWT))
	if err != nil {
		return "", fmt.Errorf("push account %s: %w (are these system account credentials?)", ac.Name, err)
	}
	var r claimUpdateResponse
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return "", fmt.Errorf("push account %s: unreadable answer %q", ac.Name, msg.Data)
	}
	if r.Error != nil {
		return r.Server.Name, fmt.Errorf("push account %s: server %s: %s", ac.Name, r.Server.Name, r.Error.Description)
	}
	if r.Data == nil || r.Data.Code != 200 && r.Data.Code != 0 {
		return r.Server.Name, fmt.Errorf("push account %s: server %s answered %q", ac.Name, r.Server.Name, msg.Data)
	}
	return r.Server.Name, nil
}
