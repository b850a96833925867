package rollout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// decodeObject decodes a JSON object field by field into the pointers of
// fields, so that an error names the field it is about. Fields absent from b
// keep the values the caller put there: that is how defaults apply to
// omitted fields while an explicit 0 stays 0. With strict, an unknown field
// (a typo such as "max_inflight") is an error instead of a silently ignored
// setting; without, it is skipped, so that an older reader accepts a value a
// newer writer added a field to.
func decodeObject(b []byte, fields map[string]any, strict bool) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("want a JSON object: %w", err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		dst, ok := fields[k]
		if !ok && !strict {
			continue
		}
		if !ok {
			known := make([]string, 0, len(fields))
			for f := range fields {
				known = append(known, f)
			}
			slices.Sort(known)
			return fmt.Errorf("unknown field %q (known: %v)", truncate(k, 40), known)
		}
		if err := json.Unmarshal(raw[k], dst); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}
