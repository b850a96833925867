package install

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/renameio/v2"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// AgentIDFileName holds the agent's update id under the root.
const AgentIDFileName = "agent_id"

// LoadOrCreateAgentID returns the agent id kept in root/agent_id, creating a
// random one on first use. The id decides the agent's place in every rollout,
// so a damaged file is reported, not regenerated behind the operator's back.
func LoadOrCreateAgentID(root string) (rollout.AgentID, error) {
	id, err := LoadAgentID(root)
	if !errors.Is(err, fs.ErrNotExist) {
		return id, err
	}
	if id, err = rollout.NewAgentID(nil); err != nil {
		return "", err
	}
	if err := WriteAgentID(root, id); err != nil {
		return "", err
	}
	return id, nil
}

// LoadAgentID reads root/agent_id, creating nothing: a missing file is
// fs.ErrNotExist, a damaged one ErrCorrupt.
func LoadAgentID(root string) (rollout.AgentID, error) {
	path := filepath.Join(root, AgentIDFileName)
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	id, err := rollout.ParseAgentID(strings.TrimSpace(string(data)))
	if err != nil {
		return "", fmt.Errorf("%s: %w: %v (remove it to draw a new id)", path, ErrCorrupt, err)
	}
	return id, nil
}

// WriteAgentID writes id to root/agent_id atomically, creating root.
func WriteAgentID(root string, id rollout.AgentID) error {
	path := filepath.Join(root, AgentIDFileName)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", root, err)
	}
	if err := renameio.WriteFile(path, []byte(string(id)+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
