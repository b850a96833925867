package sim

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
)

// appendHeartbeat appends h as JSON, byte for byte what heartbeat.Encode
// writes for it (TestAppendHeartbeatIsEncode checks every kind of
// heartbeat the simulator sends), into a buffer the caller reuses.
//
// Why not heartbeat.Encode: a million agents heartbeating every 30 s are
// 33,000 heartbeats a second, and Encode (validation, reflection, a new
// buffer each) was half the simulator's CPU at 250,000 agents, CPU the
// controller and the server under test need on the same machine. What the
// simulator sends is valid by construction; the test runs Validate on it.
func appendHeartbeat(b []byte, h *heartbeat.Heartbeat) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(h.V), 10)
	b = appendField(b, "agent_id", string(h.AgentID))
	b = appendField(b, "hostname", h.Hostname)
	b = appendField(b, "group", h.Group)
	b = appendField(b, "active_version", h.ActiveVersion)
	b = appendField(b, "start_version", h.StartVersion)
	if !h.StartTime.IsZero() {
		b = append(b, `,"start_time":`...)
		b = appendTime(b, h.StartTime)
	}
	b = append(b, `,"rollback":`...)
	b = strconv.AppendBool(b, h.Rollback)
	b = appendField(b, "rollback_from", h.RollbackFrom)
	b = appendField(b, "error", h.Error)
	if h.ErrorClass != "" {
		b = appendField(b, "error_class", h.ErrorClass)
	}
	if h.ErrorCause != "" {
		b = appendField(b, "error_cause", h.ErrorCause)
	}
	if h.UpdatingTo != "" {
		b = appendField(b, "updating_to", h.UpdatingTo)
	}
	b = appendField(b, "updater_version", h.UpdaterVersion)
	b = append(b, `,"at":`...)
	b = appendTime(b, h.At)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, h.Seq, 10)
	if h.Site != "" {
		b = appendField(b, "site", h.Site)
	}
	if h.App != "" {
		b = appendField(b, "app", h.App)
	}
	if h.Installer != "" {
		b = appendField(b, "installer", h.Installer)
	}
	if h.Left {
		b = append(b, `,"left":true`...)
	}
	return append(b, '}')
}

func appendField(b []byte, name, value string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, value)
}

// appendString writes s as a JSON string as heartbeat.Encode does (no HTML
// escaping): printable ASCII other than '"' and '\' as it is, anything
// else through encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plain[s[i]] {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plain are the bytes a JSON string holds as they are.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendTime writes t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds, quoted).
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}
