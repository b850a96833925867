package install

import (
	"time"
)

// appRecord identifies the supervised app's process group: enough to find
// the group, and to tell it from an unrelated process that was given the
// same pid since. StartTimeTicks is field 22 of /proc/<pid>/stat (clock
// ticks since boot) and BootID is /proc/sys/kernel/random/boot_id: a pid and
// a start time name one process only within one boot. Both are empty
// outside Linux.
type appRecord struct {
	PID            int       `json:"pid"`
	PGID           int       `json:"pgid"`
	SID            int       `json:"sid,omitempty"`
	StartTimeTicks uint64    `json:"start_time_ticks,omitempty"`
	BootID         string    `json:"boot_id,omitempty"`
	Path           string    `json:"path"`
	StartedAt      time.Time `json:"started_at"`
}

// recordFor describes the process group our child pid leads. Until the child
// is waited for, its pid cannot be given to another process (a dead child
// stays a zombie), so what /proc says now is about our child.
func recordFor(pid int, path string, now time.Time) appRecord {
	rec := appRecord{PID: pid, PGID: pid, Path: path, StartedAt: now.UTC()}
	if !procAvailable() {
		return rec
	}
	if pi, err := readProc(pid); err == nil {
		rec.SID, rec.StartTimeTicks, rec.BootID = pi.SID, pi.StartTime, bootID()
	}
	return rec
}

// sameLeader reports whether pi, the process now holding rec.PID, is the
// recorded leader: same start time and still in the recorded group. A pid
// given to another process since fails the first test.
func (rec appRecord) sameLeader(pi procInfo) bool {
	return pi.StartTime == rec.StartTimeTicks && pi.PGID == rec.PGID
}

// member reports whether pi, a process found in group rec.PGID after the
// leader's pid was freed, can belong to the recorded group. Linux does not
// give a number out as a pid while a process group of that id has members,
// so members found then are the recorded group's — unless the whole group
// ended, the number went to a new group leader, and that leader exited too.
// Members of that group started later than the recorded leader, as ours did,
// but normally live in another session; a process that started before the
// leader is never ours.
func (rec appRecord) member(pi procInfo) bool {
	return pi.PGID == rec.PGID && pi.SID == rec.SID && pi.StartTime >= rec.StartTimeTicks
}
