//go:build !linux

package install

import "errors"

// Outside Linux there is no /proc to tell who a pid is: ProcessRunner still
// records the app's group (for the operator), and stops its own child's
// whole group, but never signals a group an earlier agentd recorded, since
// it could not tell it from a process that got the same pid since.

var errNoProc = errors.New("no /proc on this system")

func procAvailable() bool                  { return false }
func readProc(int) (procInfo, error)       { return procInfo{}, errNoProc }
func groupMembers(int) ([]procInfo, error) { return nil, errNoProc }
func withEnv(string) ([]procInfo, error)   { return nil, errNoProc }
func bootID() string                       { return "" }
