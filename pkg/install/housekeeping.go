package install

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ReserveName is a file of reserveSize bytes under the root, kept so that a
// host whose disk a bad release filled can still record its rollback (the
// journal and update.yaml need a few blocks): withSpace deletes it when a
// write fails for lack of space, and the next install makes it again.
const ReserveName = "space.reserve"

const reserveSize = 1 << 20

func (in *Installer) reservePath() string { return filepath.Join(in.Tree.Root, ReserveName) }

// keepReserve makes the reserve file if it is missing (best effort: a disk
// too full for it is reported by what fails next).
func (in *Installer) keepReserve() {
	path := in.reservePath()
	if fi, err := os.Stat(path); err == nil && fi.Size() == reserveSize {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return
	}
	_, err = f.Write(make([]byte, reserveSize))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
}

// withSpace runs write, and once more after giving up the reserve file if it
// failed for lack of space.
func (in *Installer) withSpace(write func() error) error {
	err := write()
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	if rerr := os.Remove(in.reservePath()); rerr != nil {
		return err
	}
	in.Log.Warn("disk full: released the space reserve to record the install's state", slog.String("reserve", in.reservePath()))
	return write()
}

// sweep removes the temp files of interrupted work: partial downloads
// (except next's, resumed by the install about to run), extraction dirs,
// backup work dirs, database restore copies, and the temp files and dirs
// renameio leaves beside update.yaml, the journal and the bin dir's links.
// The lock must be held: no other updater is writing any of them.
func (in *Installer) sweep(next string) {
	var junk []string
	add := func(pattern string) {
		m, _ := filepath.Glob(pattern)
		junk = append(junk, m...)
	}
	vdir := in.Tree.VersionsDir()
	add(filepath.Join(vdir, ".extract-*"))
	add(filepath.Join(vdir, ".download-*"))
	add(filepath.Join(vdir, "*", backupWorkGlob))
	if in.DBPath != "" {
		add(filepath.Join(filepath.Dir(in.DBPath), "."+filepath.Base(in.DBPath)+".restore-*"))
	}
	for _, name := range []string{UpdateFileName, JournalName, AgentIDFileName, LinksFileName, AppPIDName, ScriptPIDName} {
		add(filepath.Join(in.Tree.Root, "."+name+"[0-9]*"))
	}
	// renameio.Symlink's work dirs: ".<name><digits>/tmp.symlink".
	if links, err := filepath.Glob(filepath.Join(in.Tree.BinDir, ".*", "tmp.symlink")); err == nil {
		for _, l := range links {
			junk = append(junk, filepath.Dir(l))
		}
	}
	keep := ""
	if next != "" {
		keep = filepath.Join(vdir, ".download-"+next+".part")
	}
	for _, p := range junk {
		if p == keep || !isTempName(filepath.Base(p)) {
			continue
		}
		if err := os.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			in.Log.Warn("removing a leftover temp file failed", slog.String("path", p), slog.Any("err", err))
			continue
		}
		in.Log.Info("removed a leftover of interrupted work", slog.String("path", p))
	}
}

// isTempName guards sweep: only dot names are ever removed.
func isTempName(base string) bool { return strings.HasPrefix(base, ".") && len(base) > 1 }
