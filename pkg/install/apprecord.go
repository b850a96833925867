package install

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/google/renameio/v2"
)

// appRecord is the supervised app's process group as ProcessRunner.PIDFile
// records it: enough for a later agentd to find the group, and to tell it
// from an unrelated process that was given the same pid since.
//
//	{"instance": "9f…", "pid": 4242, "pgid": 4242, "sid": 4100,
//	 "start_time_ticks": 1834567, "boot_id": "…",
//	 "path": "/usr/local/bin/app", "started_at": "…"}
//
// start_time_ticks is field 22 of /proc/<pid>/stat (clock ticks since boot)
// and boot_id is /proc/sys/kernel/random/boot_id: a pid and a start time
// name one process only within one boot. Both are empty outside Linux.
//
// instance is a random id the app is started with in its environment
// (instanceEnv). The record is first written with it alone (pid 0), before
// the app starts, so that an agentd killed before it could record the pid
// still leaves a way to find the app.
type appRecord struct {
	Instance       string    `json:"instance,omitempty"`
	PID            int       `json:"pid"`
	PGID           int       `json:"pgid"`
	SID            int       `json:"sid,omitempty"`
	StartTimeTicks uint64    `json:"start_time_ticks,omitempty"`
	BootID         string    `json:"boot_id,omitempty"`
	Path           string    `json:"path"`
	StartedAt      time.Time `json:"started_at"`
}

// instanceEnv is the variable that carries a started app's instance id.
const instanceEnv = "FLEETWAVE_APP_INSTANCE"

// newInstance draws an instance id.
func newInstance() string { return rand.Text() }

// starting reports a record written before its app started: the pid is not
// known, only the instance.
func (rec appRecord) starting() bool { return rec.PID == 0 }

// instanceGroups finds the process groups of the app started with rec's
// instance (a record written just before an agentd was killed, so without
// a pid) and describes each as a record to end it by. The instance, unlike
// a pid, is never reused.
func instanceGroups(rec appRecord) ([]appRecord, error) {
	procs, err := withEnv(instanceEnv + "=" + rec.Instance)
	if err != nil {
		return nil, err
	}
	// The group's leader started first: its start time is the group's.
	groups := map[int]appRecord{}
	for _, pi := range procs {
		if pi.exited() {
			continue
		}
		if g, ok := groups[pi.PGID]; ok && g.StartTimeTicks <= pi.StartTime {
			continue
		}
		groups[pi.PGID] = appRecord{Instance: rec.Instance, PID: pi.PGID, PGID: pi.PGID, SID: pi.SID,
			StartTimeTicks: pi.StartTime, BootID: rec.BootID, Path: rec.Path, StartedAt: rec.StartedAt}
	}
	var out []appRecord
	for _, pgid := range slices.Sorted(maps.Keys(groups)) {
		out = append(out, groups[pgid])
	}
	return out, nil
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

// verifiable reports whether rec carries what it takes to know that a live
// process is the recorded one; without it nothing may be signalled.
func (rec appRecord) verifiable() bool {
	if !procAvailable() {
		return false
	}
	return rec.starting() && rec.Instance != "" || rec.PGID > 1 && rec.StartTimeTicks != 0
}

// readRecord reads the record at path; ok is false when there is none.
func readRecord(path string) (rec appRecord, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(data, &rec); err != nil || !(rec.PID > 1 && rec.PGID > 1 || rec.starting() && rec.Instance != "") {
		return rec, false, fmt.Errorf("%s: %w: want the JSON of the app's process group (remove it once no app an earlier agentd started runs)", path, ErrCorrupt)
	}
	return rec, true, nil
}

// writeRecord replaces the record at path atomically (temp file, fsync,
// rename): an agentd killed while writing leaves the old record or the new
// one, never half of either. The directory is not synced: the record only
// matters while its processes run, and a crash of the host ends them (its
// boot_id then marks the record stale).
func writeRecord(path string, rec appRecord) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// removeRecord removes the record at path if it is of the app started as
// instance: a record written since by another runner (a newer start) stays.
func removeRecord(path, instance string) error {
	rec, ok, err := readRecord(path)
	if err != nil || !ok || rec.Instance != instance {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
