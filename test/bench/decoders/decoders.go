// Package decoders measures the candidate JSON decoders for heartbeats
// (issue 17, point 1) side by side: speed and allocations in
// BenchmarkDecode, and in TestStrictness where each one accepts, rejects or
// decodes differently from encoding/json, which is what pkg/heartbeat's
// Decode must keep doing exactly. It is a module of its own so that no
// candidate library enters the main module's go.mod.
package decoders

import (
	"encoding/json"
	"fmt"

	"github.com/bytedance/sonic"
	gojson "github.com/goccy/go-json"
	jsoniter "github.com/json-iterator/go"
	segjson "github.com/segmentio/encoding/json"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
)

// Ours names the main module's heartbeat.Decode.
const Ours = "ours"

// Decoder decodes and validates one heartbeat, as heartbeat.Decode does.
type Decoder func(data []byte) (*heartbeat.Heartbeat, error)

// Parser is a candidate's parse alone: no size limit, no Validate. h is
// zero on entry.
type Parser func(data []byte, h *heartbeat.Heartbeat) error

// Candidate is one way of decoding heartbeats.
type Candidate struct {
	Name  string
	Short string // a column heading of at most 8 characters
	// New returns a Decoder for one goroutine: some candidates keep state
	// (a parser, a reused struct) that is not safe for concurrent use.
	New func() Decoder
	// NewParser returns the candidate's Parser, for one goroutine; nil for
	// "ours", whose parse is not exported.
	NewParser func() Parser
}

// Candidates are every decoder measured, encoding/json's (today's Decode
// rebuilt here, the reference) first and the main module's Decode, whatever
// it is at the time, last.
func Candidates() []Candidate {
	cs := []Candidate{
		stateless("encoding/json", "json", json.Unmarshal),
		{Name: "encoding/json reuse", Short: "reuse", New: reuseDecoder, NewParser: stateless("", "", json.Unmarshal).NewParser},
		stateless("goccy/go-json", "goccy", gojson.Unmarshal),
		stateless("sonic ConfigStd", "sonic", sonic.ConfigStd.Unmarshal),
		stateless("segmentio/encoding", "segment", segjson.Unmarshal),
		stateless("jsoniter compat", "jsoniter", jsoniter.ConfigCompatibleWithStandardLibrary.Unmarshal),
		{Name: "fastjson by hand", Short: "fastjson", New: func() Decoder { return decoder(newFastjson()) }, NewParser: newFastjson},
	}
	cs = append(cs, jsonV2...) // only with GOEXPERIMENT=jsonv2
	return append(cs, Candidate{Name: Ours, Short: Ours, New: func() Decoder { return heartbeat.Decode }})
}

// stateless is a candidate whose unmarshal function keeps no state.
func stateless(name, short string, unmarshal func([]byte, any) error) Candidate {
	p := func(data []byte, h *heartbeat.Heartbeat) error { return unmarshal(data, h) }
	return Candidate{
		Name:      name,
		Short:     short,
		New:       func() Decoder { return decoder(p) },
		NewParser: func() Parser { return p },
	}
}

// decoder is heartbeat.Decode as it was before issue 17, with parse in
// place of json.Unmarshal: the same size limit, the same errors, a fresh
// Heartbeat for each call.
func decoder(parse Parser) Decoder {
	return func(data []byte) (*heartbeat.Heartbeat, error) {
		if len(data) > heartbeat.MaxSize {
			return nil, fmt.Errorf("%w: %d bytes, limit %d", heartbeat.ErrTooLarge, len(data), heartbeat.MaxSize)
		}
		var h heartbeat.Heartbeat
		if err := parse(data, &h); err != nil {
			return nil, fmt.Errorf("%w: %v", heartbeat.ErrMalformed, err)
		}
		if err := h.Validate(); err != nil {
			return nil, err
		}
		return &h, nil
	}
}

// reuseDecoder is encoding/json into one Heartbeat per goroutine, zeroed
// before each call (else a field the payload leaves out would keep the last
// agent's value). The result is valid until the next call: the aggregator
// copies it (Observe stores *hb), so the controller could use it.
func reuseDecoder() Decoder {
	h := new(heartbeat.Heartbeat)
	return func(data []byte) (*heartbeat.Heartbeat, error) {
		if len(data) > heartbeat.MaxSize {
			return nil, fmt.Errorf("%w: %d bytes, limit %d", heartbeat.ErrTooLarge, len(data), heartbeat.MaxSize)
		}
		*h = heartbeat.Heartbeat{}
		if err := json.Unmarshal(data, h); err != nil {
			return nil, fmt.Errorf("%w: %v", heartbeat.ErrMalformed, err)
		}
		if err := h.Validate(); err != nil {
			return nil, err
		}
		return h, nil
	}
}
