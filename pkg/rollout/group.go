package rollout

import "fmt"

// MaxGroupNameLen bounds group names so that subjects and keys stay short.
const MaxGroupNameLen = 63

// ValidateGroupName checks that g can be used as a NATS subject token and a KV
// key part: 1-63 characters of a-z, 0-9, '-' and '_', starting and ending with
// a letter or digit.
func ValidateGroupName(g string) error {
	if g == "" {
		return fmt.Errorf("%w: empty", ErrBadGroupName)
	}
	if len(g) > MaxGroupNameLen {
		return fmt.Errorf("%w %q: longer than %d characters", ErrBadGroupName, truncate(g, 70), MaxGroupNameLen)
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if alnum || (c == '-' || c == '_') && i != 0 && i != len(g)-1 {
			continue
		}
		return fmt.Errorf("%w %q: use a-z, 0-9, '-' and '_', starting and ending with a letter or digit", ErrBadGroupName, g)
	}
	return nil
}
