package heartbeat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// SchemaVersion is the "v" of heartbeats this package writes and reads.
const SchemaVersion = 1

// MaxSize is the largest heartbeat accepted, in bytes. A real one is ~400.
const MaxSize = 4096

// MaxErrorLen bounds the error text an agent puts in a heartbeat, so a long
// error never pushes the heartbeat over MaxSize.
const MaxErrorLen = 1024

const maxHostnameLen = 255

// Heartbeat is one agent's report: the status block of its update.yaml plus
// who it is. Agents publish it on SubjectFor(group, agent_id).
type Heartbeat struct {
	V              int             `json:"v"`
	AgentID        rollout.AgentID `json:"agent_id"`
	Hostname       string          `json:"hostname"`
	Group          string          `json:"group"`
	ActiveVersion  string          `json:"active_version"`
	StartVersion   string          `json:"start_version"`
	StartTime      time.Time       `json:"start_time,omitzero"`
	Rollback       bool            `json:"rollback"`
	RollbackFrom   string          `json:"rollback_from"`
	Error          string          `json:"error"`
	UpdaterVersion string          `json:"updater_version"`
	At             time.Time       `json:"at"`
	Seq            uint64          `json:"seq"`
}

// Failed reports whether the agent counts as failed: it rolled back, or its
// last update attempt left an error.
func (h *Heartbeat) Failed() bool { return h.Rollback || h.Error != "" }

// Version is the key this agent is counted under: its active version, or
// rollout.NoVersion when nothing is installed.
func (h *Heartbeat) Version() string {
	if h.ActiveVersion == "" {
		return rollout.NoVersion
	}
	return h.ActiveVersion
}

// Encode validates h and returns its JSON. The agent uses it so that it can
// never publish what a controller would reject.
func Encode(h *Heartbeat) ([]byte, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode heartbeat: %w", err)
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), MaxSize)
	}
	return b, nil
}

// Decode parses and validates a heartbeat. It rejects payloads over MaxSize,
// trailing data, a "v" other than SchemaVersion, and any field that fails
// Validate. Unknown fields are ignored so that a newer agent adding a field
// (without changing "v") is not dropped from the inventory of an older
// controller.
func Decode(data []byte) (*Heartbeat, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxSize)
	}
	var h Heartbeat
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrMalformed)
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return &h, nil
}

// Validate checks every field against the contract of DESIGN §2.
func (h *Heartbeat) Validate() error {
	if h.V != SchemaVersion {
		return fmt.Errorf("%w: v=%d, this build reads v=%d", ErrUnsupportedVersion, h.V, SchemaVersion)
	}
	if _, err := rollout.ParseAgentID(string(h.AgentID)); err != nil {
		return fmt.Errorf("%w: agent_id: %w", ErrMalformed, err)
	}
	if err := rollout.ValidateGroupName(h.Group); err != nil {
		return fmt.Errorf("%w: group: %w", ErrMalformed, err)
	}
	if len(h.Hostname) > maxHostnameLen {
		return fmt.Errorf("%w: hostname longer than %d bytes", ErrMalformed, maxHostnameLen)
	}
	for _, f := range []struct {
		name, value string
		required    bool
	}{
		{"active_version", h.ActiveVersion, false},
		{"start_version", h.StartVersion, false},
		{"rollback_from", h.RollbackFrom, false},
		{"updater_version", h.UpdaterVersion, false},
	} {
		if f.value == "" && !f.required {
			continue
		}
		if err := rollout.ValidateVersion(f.value); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrMalformed, f.name, err)
		}
	}
	if h.Rollback && h.RollbackFrom == "" {
		return fmt.Errorf("%w: rollback is true but rollback_from is empty", ErrMalformed)
	}
	if len(h.Error) > MaxErrorLen {
		return fmt.Errorf("%w: error longer than %d bytes", ErrMalformed, MaxErrorLen)
	}
	if h.At.IsZero() {
		return fmt.Errorf("%w: at is missing", ErrMalformed)
	}
	return nil
}
