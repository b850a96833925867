package rollout

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
)

// AgentID is an agent's random 128-bit update id, written as a canonical
// lowercase UUID ("1b4e28ba-2fa1-4d2e-883f-0016d3cca427"). Its numeric value
// places the agent in the rollout: see Fraction.
type AgentID string

// NewAgentID draws a random version-4 UUID from r (crypto/rand when nil).
func NewAgentID(r io.Reader) (AgentID, error) {
	if r == nil {
		r = rand.Reader
	}
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("new agent id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return AgentID(s[:]), nil
}

// ParseAgentID accepts only the canonical form: 36 characters, lowercase hex,
// hyphens at 8, 13, 18 and 23. One spelling per agent keeps one subject and one
// inventory entry per agent.
func ParseAgentID(s string) (AgentID, error) {
	if len(s) != 36 {
		return "", fmt.Errorf("%w %q: want a lowercase UUID like 1b4e28ba-2fa1-4d2e-883f-0016d3cca427", ErrBadAgentID, truncate(s, 40))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", fmt.Errorf("%w %q: hyphen expected at position %d", ErrBadAgentID, s, i)
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return "", fmt.Errorf("%w %q: %q is not a lowercase hex digit", ErrBadAgentID, s, c)
			}
		}
	}
	return AgentID(s), nil
}

// Fraction maps the id to [0, 1): its first 53 bits divided by 2^53. Ids are
// uniform, so the fraction is uniform, and "fraction < progress" selects about
// progress × N agents. 53 bits because that is what a float64 holds exactly;
// more would round the largest ids up to 1.0.
//
// The rollout engine computes it for every agent of a group on every pass,
// and agents on every plan change: it reads the 16 hex digits in place,
// allocating nothing. An id that is not 36 characters with hex digits
// there maps to 0.
func (id AgentID) Fraction() float64 {
	if len(id) != 36 {
		return 0
	}
	var v uint64
	for i := 0; i < 18; i++ {
		if i == 8 || i == 13 {
			continue // the hyphens, not checked (as before: not read)
		}
		d, ok := hexDigit(id[i])
		if !ok {
			return 0
		}
		v = v<<4 | uint64(d)
	}
	return float64(v>>11) / (1 << 53)
}

// hexDigit is the value of one hex digit, either case (as encoding/hex).
func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
