package rollout

import "unicode/utf8"

// ClipText is s cut to at most n bytes, at a character boundary, with "…"
// added when anything was cut: how a peer's text (a Prometheus label, an
// error it answered) is kept small before it enters a status, an event or
// a log line. n < 1 gives "" for any s.
func ClipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
