package agentd

import (
	"os"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether f is a terminal: it has terminal attributes
// (a character device such as /dev/null does not), so a redrawn progress
// line goes only where someone watches.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
