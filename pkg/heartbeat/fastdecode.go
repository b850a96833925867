package heartbeat

import (
	"bytes"
	"math"
	"time"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// decodeFast fills h (which must be the zero Heartbeat) from data when data
// is a heartbeat in the plain form agents write: one JSON object whose keys
// are this package's own field names, exactly; strings without escapes in
// valid UTF-8; "v" and "seq" plain non-negative integers; booleans; times
// that time.Time's UnmarshalJSON takes. It reports false for anything else
// (an escape, an unknown or differently cased key, a null, a number with a
// sign, fraction or exponent, any syntax error), and then h may hold part of
// the input: Decode starts over with encoding/json, which gives the answer
// and the error message it always gave.
//
// For every input it accepts it fills h exactly as json.Unmarshal does
// (FuzzDecode checks this against encoding/json on every input), so the
// fast path changes how fast a heartbeat is read, never what is read.
//
// in interns the short strings that repeat across a fleet (groups,
// versions, classes, causes, sites) so that decoding them allocates
// nothing; nil allocates each.
func decodeFast(data []byte, h *Heartbeat, in *interner) bool {
	p := fastParser{b: data}
	p.ws()
	if !p.byte('{') {
		return false
	}
	p.ws()
	if p.byte('}') {
		return p.end()
	}
	for {
		key, ok := p.plainString()
		if !ok {
			return false
		}
		p.ws()
		if !p.byte(':') {
			return false
		}
		p.ws()
		switch string(key) { // no allocation: the compiler compares bytes
		case "v":
			n, ok := p.uint(math.MaxInt)
			if !ok {
				return false
			}
			h.V = int(n)
		case "seq":
			n, ok := p.uint(math.MaxUint64)
			if !ok {
				return false
			}
			h.Seq = n
		case "rollback":
			b, ok := p.bool()
			if !ok {
				return false
			}
			h.Rollback = b
		case "left":
			b, ok := p.bool()
			if !ok {
				return false
			}
			h.Left = b
		case "at":
			if !p.time(&h.At) {
				return false
			}
		case "start_time":
			if !p.time(&h.StartTime) {
				return false
			}
		case "labels":
			if !p.labels(&h.Labels, in) {
				return false
			}
		default:
			dst, shared := h.stringField(key)
			if dst == nil {
				return false
			}
			s, ok := p.plainString()
			if !ok {
				return false
			}
			if shared {
				*dst = in.string(s)
			} else {
				*dst = string(s)
			}
		}
		p.ws()
		if p.byte('}') {
			return p.end()
		}
		if !p.byte(',') {
			return false
		}
		p.ws()
	}
}

// stringField is where the string value of key goes, and whether it is one
// of the short values many agents share; nil for a key that is not a string
// field of Heartbeat.
func (h *Heartbeat) stringField(key []byte) (dst *string, shared bool) {
	switch string(key) {
	case "agent_id":
		return (*string)(&h.AgentID), false
	case "hostname":
		return &h.Hostname, false
	case "error":
		return &h.Error, false
	case "error_output":
		return &h.ErrorOutput, false
	case "group":
		return &h.Group, true
	case "active_version":
		return &h.ActiveVersion, true
	case "start_version":
		return &h.StartVersion, true
	case "rollback_from":
		return &h.RollbackFrom, true
	case "error_class":
		return &h.ErrorClass, true
	case "error_cause":
		return &h.ErrorCause, true
	case "updating_to":
		return &h.UpdatingTo, true
	case "updater_version":
		return &h.UpdaterVersion, true
	case "site":
		return &h.Site, true
	case "app":
		return &h.App, true
	case "installer":
		return &h.Installer, true
	}
	return nil, false
}

type fastParser struct {
	b []byte
	i int
}

// ws skips JSON whitespace.
func (p *fastParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c if it is next.
func (p *fastParser) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only whitespace follows.
func (p *fastParser) end() bool {
	p.ws()
	return p.i == len(p.b)
}

// plainString reads a string with no escapes and no control characters in
// valid UTF-8 (json.Unmarshal would replace invalid bytes: left to it) and
// returns its bytes, without the quotes.
func (p *fastParser) plainString() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	n := bytes.IndexByte(p.b[p.i:], '"')
	if n < 0 {
		return nil, false
	}
	s := p.b[p.i : p.i+n]
	p.i += n + 1
	ascii := true
	for _, c := range s {
		if c < 0x20 || c == '\\' {
			return nil, false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return s, ascii || utf8.Valid(s)
}

// uint reads a plain non-negative integer no greater than limit, followed
// by a delimiter.
func (p *fastParser) uint(limit uint64) (uint64, bool) {
	start := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		d := uint64(p.b[p.i] - '0')
		if n > (limit-d)/10 {
			return 0, false
		}
		n = n*10 + d
		p.i++
	}
	l := p.i - start
	if l == 0 || (l > 1 && p.b[start] == '0') {
		return 0, false
	}
	return n, p.delimited()
}

// bool reads true or false, followed by a delimiter.
func (p *fastParser) bool() (bool, bool) {
	rest := p.b[p.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		p.i += 4
		return true, p.delimited()
	case len(rest) >= 5 && string(rest[:5]) == "false":
		p.i += 5
		return false, p.delimited()
	}
	return false, false
}

// delimited reports whether a literal ends here: at whitespace, ',' or '}'
// (what may follow a member's value).
func (p *fastParser) delimited() bool {
	if p.i == len(p.b) {
		return false
	}
	switch p.b[p.i] {
	case ' ', '\t', '\n', '\r', ',', '}':
		return true
	}
	return false
}

// time reads a plain string into t with time.Time's own UnmarshalJSON, as
// json.Unmarshal does.
func (p *fastParser) time(t *time.Time) bool {
	start := p.i
	if _, ok := p.plainString(); !ok {
		return false
	}
	return t.UnmarshalJSON(p.b[start:p.i]) == nil
}

// labels reads an object of plain strings into s as UnmarshalJSON would
// (a later duplicate key wins, as in a map), refusing what it would refuse
// (MakeLabelSet's rules), and false for anything else. in keeps the sets
// it has seen, by their bytes, so that the thousands of agents that send
// the same labels share one LabelSet and decoding them allocates nothing.
func (p *fastParser) labels(s *LabelSet, in *interner) bool {
	start := p.i
	if !p.byte('{') {
		return false
	}
	// Parse first, so that a cached set is only ever taken for bytes
	// that are a whole object of plain strings.
	p.ws()
	var buf [rollout.MaxLabels + 1][2][]byte
	pairs := buf[:0]
	if !p.byte('}') {
		for {
			k, ok := p.plainString()
			if !ok {
				return false
			}
			p.ws()
			if !p.byte(':') {
				return false
			}
			p.ws()
			v, ok := p.plainString()
			if !ok {
				return false
			}
			if len(pairs) > rollout.MaxLabels {
				return false // encoding/json says why
			}
			pairs = append(pairs, [2][]byte{k, v})
			p.ws()
			if p.byte('}') {
				break
			}
			if !p.byte(',') {
				return false
			}
			p.ws()
		}
	}
	raw := p.b[start:p.i]
	if set, ok := in.labelSet(raw); ok {
		*s = set
		return true
	}
	m := make(rollout.Labels, len(pairs))
	for _, kv := range pairs {
		m[string(kv[0])] = string(kv[1])
	}
	set, err := MakeLabelSet(m)
	if err != nil {
		return false
	}
	in.keepLabelSet(raw, set)
	*s = set
	return true
}

// interner hands out one string per distinct short value, so that the
// thousands of heartbeats naming the same group or version share it and
// decoding them allocates nothing. It is bounded: once full it allocates as
// if it were not there. Not safe for concurrent use.
type interner struct {
	m      map[string]string
	labels map[string]LabelSet // by the object's bytes
}

const internMaxLabelSets = 1024

func (in *interner) labelSet(raw []byte) (LabelSet, bool) {
	if in == nil {
		return LabelSet{}, false
	}
	s, ok := in.labels[string(raw)] // no allocation for the lookup
	return s, ok
}

func (in *interner) keepLabelSet(raw []byte, s LabelSet) {
	if in == nil || len(in.labels) >= internMaxLabelSets {
		return
	}
	if in.labels == nil {
		in.labels = make(map[string]LabelSet)
	}
	in.labels[string(raw)] = s
}

const (
	internMaxEntries = 4096
	internMaxLen     = 64
)

func (in *interner) string(b []byte) string {
	if in == nil || len(b) > internMaxLen {
		return string(b)
	}
	if s, ok := in.m[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	if in.m == nil {
		in.m = make(map[string]string)
	}
	if len(in.m) < internMaxEntries {
		in.m[s] = s
	}
	return s
}
