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

// ClosestGroupName returns the name in names nearest to g by edit distance
// (insertions, deletions, substitutions and swaps of two neighbours each
// count one), for "did you mean" hints on a mistyped group. Only a name
// within a third of g's length (at least 1, at most 3 edits) counts as close;
// ok is false when none does. Ties go to the name listed first.
func ClosestGroupName(g string, names []string) (name string, ok bool) {
	limit := min(max(len(g)/3, 1), 3)
	best := limit + 1
	for _, n := range names {
		if d := editDistance(g, n); d < best && n != g {
			name, best = n, d
		}
	}
	return name, best <= limit
}

// editDistance is the optimal string alignment distance between a and b,
// byte-wise (group names are ASCII).
func editDistance(a, b string) int {
	// Three rows: the one before the previous is needed for swaps.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
