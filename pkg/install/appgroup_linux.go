package install

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// procAvailable reports whether /proc can say who a pid is; in a container
// without /proc mounted it cannot, and ProcessRunner then stops only its own
// child.
var procAvailable = sync.OnceValue(func() bool {
	_, err := readProc(os.Getpid())
	return err == nil
})

// readProc parses /proc/<pid>/stat. A process that does not exist is
// fs.ErrNotExist.
func readProc(pid int) (procInfo, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, syscall.ESRCH) {
		// It exited between the open and the read: as gone as ENOENT.
		return procInfo{}, fmt.Errorf("process %d: %w", pid, fs.ErrNotExist)
	}
	if err != nil {
		return procInfo{}, err
	}
	return parseStat(data)
}

// parseStat parses the text of /proc/<pid>/stat: "pid (comm) state ppid pgrp
// session … starttime …". comm may hold spaces and parentheses, so fields
// are counted from the last ')'.
func parseStat(data []byte) (procInfo, error) {
	i := bytes.LastIndexByte(data, ')')
	j := bytes.IndexByte(data, ' ')
	if i < 0 || j < 0 || j > i {
		return procInfo{}, fmt.Errorf("/proc stat %q: no command name", data)
	}
	// fields[0] is field 3 of proc(5), so field n is fields[n-3].
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 22-3+1 || len(fields[0]) != 1 {
		return procInfo{}, fmt.Errorf("/proc stat %q: too few fields", data)
	}
	pid, err0 := strconv.Atoi(string(data[:j]))
	pgid, err1 := strconv.Atoi(fields[5-3])
	sid, err2 := strconv.Atoi(fields[6-3])
	start, err3 := strconv.ParseUint(fields[22-3], 10, 64)
	if err := errors.Join(err0, err1, err2, err3); err != nil {
		return procInfo{}, fmt.Errorf("/proc stat %q: %w", data, err)
	}
	return procInfo{PID: pid, State: fields[0][0], PGID: pgid, SID: sid, StartTime: start}, nil
}

// groupMembers lists the processes whose process group is pgid. Processes
// that end while it looks are left out.
func groupMembers(pgid int) ([]procInfo, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var members []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if pi, err := readProc(pid); err == nil && pi.PGID == pgid {
			members = append(members, pi)
		}
	}
	return members, nil
}

// withEnv lists the processes whose environment, as they were started, holds
// the variable kv ("NAME=value").
func withEnv(kv string) ([]procInfo, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	want := []byte("\x00" + kv + "\x00")
	var found []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append(append([]byte{0}, env...), 0), want) {
			continue
		}
		if pi, err := readProc(pid); err == nil {
			found = append(found, pi)
		}
	}
	return found, nil
}

// bootID names the current boot: start times count from it.
func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}
