package decoders

import (
	"fmt"

	"github.com/valyala/fastjson"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// newFastjson is valyala/fastjson's parser with the struct filled by hand,
// as one would write it: exact key names, the last of a repeated key wins,
// null leaves a field as it is (as encoding/json does), times through
// time.Time.UnmarshalText (the same strict RFC 3339 parse as
// encoding/json's). It makes no other effort to match encoding/json: what it
// does differently is what TestStrictness shows.
func newFastjson() Parser {
	var p fastjson.Parser // reused: it keeps its buffers between calls
	return func(data []byte, h *heartbeat.Heartbeat) error {
		v, err := p.ParseBytes(data)
		if err != nil {
			return err
		}
		o, err := v.Object()
		if err != nil {
			return err
		}
		o.Visit(func(k []byte, v *fastjson.Value) {
			if err == nil {
				err = setField(h, k, v)
			}
		})
		return err
	}
}

func setField(h *heartbeat.Heartbeat, k []byte, v *fastjson.Value) error {
	if v.Type() == fastjson.TypeNull {
		return nil
	}
	var err error
	switch string(k) {
	case "v":
		h.V, err = v.Int()
	case "agent_id":
		var s string
		s, err = str(v)
		h.AgentID = rollout.AgentID(s)
	case "hostname":
		h.Hostname, err = str(v)
	case "group":
		h.Group, err = str(v)
	case "active_version":
		h.ActiveVersion, err = str(v)
	case "start_version":
		h.StartVersion, err = str(v)
	case "start_time":
		err = timeField(&h.StartTime, v)
	case "rollback":
		h.Rollback, err = v.Bool()
	case "rollback_from":
		h.RollbackFrom, err = str(v)
	case "error":
		h.Error, err = str(v)
	case "error_class":
		h.ErrorClass, err = str(v)
	case "error_cause":
		h.ErrorCause, err = str(v)
	case "updating_to":
		h.UpdatingTo, err = str(v)
	case "updater_version":
		h.UpdaterVersion, err = str(v)
	case "at":
		err = timeField(&h.At, v)
	case "seq":
		h.Seq, err = v.Uint64()
	case "site":
		h.Site, err = str(v)
	default: // unknown fields are ignored, as Decode does
	}
	if err != nil {
		return fmt.Errorf("%s: %w", k, err)
	}
	return nil
}

// str copies the string out: fastjson's points into the parser's buffer,
// which the next parse overwrites.
func str(v *fastjson.Value) (string, error) {
	b, err := v.StringBytes()
	return string(b), err
}

func timeField(t interface{ UnmarshalText([]byte) error }, v *fastjson.Value) error {
	b, err := v.StringBytes()
	if err != nil {
		return err
	}
	return t.UnmarshalText(b)
}
