package heartbeat

import (
	"encoding/json"
	"fmt"
)

// DecodeStd is Decode without its fast path: encoding/json alone, as every
// heartbeat was read before decodeFast. The fuzzers hold Decode to it.
func DecodeStd(data []byte) (*Heartbeat, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxSize)
	}
	var h Heartbeat
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return &h, nil
}

// FastPath reports whether decodeFast takes data (a test of which inputs
// skip encoding/json).
func FastPath(data []byte) bool {
	var h Heartbeat
	return decodeFast(data, &h, nil)
}
