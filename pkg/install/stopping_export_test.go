package install

import "time"

// SetStopGrace sets how long a child's death by a stop signal waits for the
// context to end, for the test, and restores it after.
func SetStopGrace(d time.Duration) (restore func()) {
	old := stopGrace
	stopGrace = d
	return func() { stopGrace = old }
}
