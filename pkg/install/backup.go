package install

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/renameio/v2"
	"go.yaml.in/yaml/v3"
	// The "sqlite" database/sql driver: pure Go, so agentd stays a static
	// binary with no cgo.
	_ "modernc.org/sqlite"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Database backups (DESIGN §4, RFD 169 "Downgrades"). Before the installer
// switches away from the active version it copies the app's SQLite database
// into that version's backup dir:
//
//	<root>/versions/<v>/backup/app.db        the database as <v> left it
//	<root>/versions/<v>/backup/backup.yaml   written last: the backup is complete
//
// A failed update restores it (RestoreDB), and so does a downgrade to <v> or
// a roll forward to exactly <v> (PlanDB), because a database a newer version
// migrated may not be readable by an older one.
//
// How the copy is made. The RFD asks for SQLite's online backup API so the
// copy is consistent while the app keeps writing. What makes any online
// copy consistent is that it is read inside one read transaction, which
// pins one snapshot for its whole duration (WAL: a reader's snapshot, and
// checkpoints never overwrite pages a reader still needs; rollback journal:
// the SHARED lock holds writers off until we are done). We keep that
// guarantee but read the pages through the sqlite_dbpage virtual table
// (compiled into modernc.org/sqlite) instead of sqlite3_backup_step or
// VACUUM INTO, because a rollback must put the database back exactly:
//
//   - sqlite3_backup rewrites header fields of the copy (file change
//     counter, version-valid-for number, schema cookie), so the copy differs
//     from the original in bytes 24-27, 40-43 and 92-95;
//   - VACUUM INTO rebuilds every b-tree, so its bytes differ throughout;
//   - sqlite_dbpage yields each page exactly as the pager sees it in our
//     snapshot, WAL frames included: the copy is byte for byte the main
//     file as a full checkpoint would leave it, and streams one page at a
//     time (serializing the database would hold all of it in memory).
//
// So "byte-identical" means: after RestoreDB the database file holds the
// same bytes as the original's main file after `PRAGMA
// wal_checkpoint(TRUNCATE)` (always true in rollback-journal mode, and in
// WAL mode once the last connection closed cleanly, which checkpoints), and
// no -wal, -shm or -journal file is left beside it.

const (
	// BackupFileName is the metadata of a backup, written last.
	BackupFileName = "backup.yaml"
	// BackupDBName is the database copy inside a backup dir.
	BackupDBName = "app.db"

	backupFileVersion = "v1"
	backupFileKind    = "db_backup"

	// Work dirs of BackupDB beside backup/ in a version dir: a new backup
	// being written, and the old one moved aside while the new one is
	// renamed in. Anything matching backupWorkGlob is a leftover of an
	// interrupted run.
	backupTmpPrefix = ".backup-tmp-"
	backupOldPrefix = ".backup-old-"
	backupWorkGlob  = ".backup-*"

	// backupBusyTimeoutMS is how long the copy waits for a writer's lock
	// (rollback-journal mode: a committing writer holds the file
	// exclusively for the length of its commit).
	backupBusyTimeoutMS = 10000
)

// BackupFilePath is backup.yaml of version v's backup.
func (t Tree) BackupFilePath(v string) string { return filepath.Join(t.BackupDir(v), BackupFileName) }

// BackupDBPath is the database copy of version v's backup.
func (t Tree) BackupDBPath(v string) string { return filepath.Join(t.BackupDir(v), BackupDBName) }

// BackupInfo describes one backup: the spec of its backup.yaml.
type BackupInfo struct {
	// Version was active when the backup was taken: its binaries read this
	// database.
	Version string `yaml:"version"`
	// CreationTime is when the backup was taken.
	CreationTime time.Time `yaml:"creation_time"`
	// DBPath is the absolute path of the database backed up, or "" when the
	// app had none: restoring that backup removes any database a later
	// version created, so the older version starts as it did before.
	DBPath string `yaml:"db_path"`
	// SHA256 is the hex checksum of the copy (BackupDBName); "" without a
	// database.
	SHA256 string `yaml:"sha256"`
	// Size is the copy's size in bytes.
	Size int64 `yaml:"size"`
	// UserVersion is the copy's PRAGMA user_version, where apps keep their
	// schema version: a version's backups all have the same one, so a
	// live database with another was written by another version and must
	// not replace this version's backup. Absent in older backups.
	UserVersion *int64 `yaml:"user_version,omitempty"`
}

// HasDB reports whether the backup holds a database, as opposed to
// recording that there was none.
func (b BackupInfo) HasDB() bool { return b.DBPath != "" }

// backupFile is backup.yaml, in the RFD's version/kind/spec shape.
type backupFile struct {
	Version string     `yaml:"version"`
	Kind    string     `yaml:"kind"`
	Spec    BackupInfo `yaml:"spec"`
}

// backupErr wraps ErrBackup; format may hold further %w verbs.
func backupErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBackup}, args...)...)
}

// BackupDB copies the live SQLite database at dbPath into version's backup
// dir and returns what backup.yaml records. The app may keep running and
// writing: the copy is one consistent snapshot. A missing dbPath (the app
// never created a database) is recorded as "no database" (DBPath ""). An
// existing backup of version is replaced atomically: the new one is built
// in a temp dir, fsynced, and renamed in, so a reader never sees a
// half-written backup (a crash between moving the old one aside and
// renaming the new one in leaves none; see backupSweep for why that is
// safe). The copy keeps the database file's mode and owner, so a restore
// gives the app a file it can open.
func BackupDB(ctx context.Context, t Tree, version, dbPath string, now time.Time) (BackupInfo, error) {
	if err := checkVersion(version); err != nil {
		return BackupInfo{}, backupErr("back up %s: %w", dbPath, err)
	}
	src, err := filepath.Abs(dbPath)
	if err != nil {
		return BackupInfo{}, backupErr("back up %s: %w", dbPath, err)
	}
	fail := func(err error) (BackupInfo, error) {
		return BackupInfo{}, backupErr("back up %s for %s: %w", src, version, err)
	}
	vdir := t.VersionDir(version)
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return fail(err)
	}
	if err := backupSweep(vdir); err != nil {
		return fail(err)
	}
	// MkdirTemp makes it 0700, which the backup keeps: the database may
	// hold the app's secrets.
	tmp, err := os.MkdirTemp(vdir, backupTmpPrefix)
	if err != nil {
		return fail(err)
	}
	defer func() {
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
	}()

	// Round(0) drops the monotonic reading so the value read back from
	// backup.yaml compares equal.
	info := BackupInfo{Version: version, CreationTime: now.Round(0).UTC()}
	fi, err := os.Stat(src)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No database yet: recorded as DBPath "", no app.db.
	case err != nil:
		return fail(err)
	case !fi.Mode().IsRegular():
		return fail(fmt.Errorf("not a regular file (%s)", fi.Mode().Type()))
	default:
		info.DBPath = src
		var uv int64
		info.SHA256, info.Size, uv, err = backupCopyDB(ctx, src, filepath.Join(tmp, BackupDBName), fi)
		if err != nil {
			return fail(err)
		}
		info.UserVersion = &uv
		// The journal's repair-first rule keeps a database of another
		// version from getting here; this is the backstop.
		if old, err := readBackupInfo(t, version); err == nil && old.UserVersion != nil && *old.UserVersion != uv {
			return fail(fmt.Errorf("the live database has user_version %d, but %s's backup has %d: it was written by another version; refusing to overwrite %s's backup with it (restore the right database, or remove %s if you are sure)",
				uv, version, *old.UserVersion, version, t.BackupDir(version)))
		}
	}

	data, err := backupMarshal(info)
	if err != nil {
		return fail(err)
	}
	// backup.yaml last: its presence is what says the backup is complete
	// (RFD 169), even to someone looking inside a half-written temp dir.
	if err := renameio.WriteFile(filepath.Join(tmp, BackupFileName), data, 0o600); err != nil {
		return fail(err)
	}
	if err := syncDir(tmp); err != nil {
		return fail(err)
	}
	if err := backupSwapDir(tmp, t.BackupDir(version)); err != nil {
		return fail(err)
	}
	tmp = ""
	return info, nil
}

// backupCopyDB streams the pages of the database at src into a new file dst
// inside one read transaction, and returns the copy's sha256, size and
// PRAGMA user_version.
func backupCopyDB(ctx context.Context, src, dst string, like fs.FileInfo) (sum string, size, userVersion int64, err error) {
	// mode=rw: never create a database that is not there. query_only: this
	// connection must never write to the app's database. Opening read-write
	// still lets SQLite roll back a hot journal left by a crashed writer,
	// which is what the app itself would do first.
	db, err := sql.Open("sqlite", backupDSN(src, "mode=rw",
		fmt.Sprintf("_pragma=busy_timeout(%d)", backupBusyTimeoutMS), "_pragma=query_only(1)"))
	if err != nil {
		return "", 0, 0, err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", 0, 0, err
	}
	// Read-only: rolling back only ends the read transaction.
	defer func() { _ = tx.Rollback() }()
	// The read transaction, and with it our snapshot, starts here and lasts
	// until the deferred Rollback: page_count and every page below come
	// from the same state of the database.
	var pages int64
	if err := tx.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		return "", 0, 0, fmt.Errorf("read %s: %w", src, err)
	}
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&userVersion); err != nil {
		return "", 0, 0, fmt.Errorf("read %s: %w", src, err)
	}

	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", 0, 0, err
	}
	defer func() {
		if out != nil {
			_ = out.Close()
		}
	}()
	h := sha256.New()
	w := io.MultiWriter(failpointWriter(out, string(StepBackup)+"/db-copy"), h)
	rows, err := tx.QueryContext(ctx, "SELECT pgno, data FROM sqlite_dbpage ORDER BY pgno")
	if err != nil {
		return "", 0, 0, fmt.Errorf("read %s: %w", src, err)
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		var pgno int64
		var data []byte
		if err := rows.Scan(&pgno, &data); err != nil {
			return "", 0, 0, fmt.Errorf("read %s: %w", src, err)
		}
		// A gap would make a file SQLite reads as a different database.
		if pgno != n+1 {
			return "", 0, 0, fmt.Errorf("read %s: page %d follows page %d", src, pgno, n)
		}
		if _, err := w.Write(data); err != nil {
			return "", 0, 0, err
		}
		n++
		size += int64(len(data))
	}
	if err := rows.Err(); err != nil {
		return "", 0, 0, fmt.Errorf("read %s: %w", src, err)
	}
	if err := ctx.Err(); err != nil {
		return "", 0, 0, err
	}
	if n != pages {
		return "", 0, 0, fmt.Errorf("read %s: copied %d of %d pages", src, n, pages)
	}
	if err := backupLikeFile(out, like); err != nil {
		return "", 0, 0, err
	}
	if err := out.Sync(); err != nil {
		return "", 0, 0, err
	}
	err = out.Close()
	out = nil
	if err != nil {
		return "", 0, 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), size, userVersion, nil
}

// backupDSN is a modernc.org/sqlite DSN for the file at path: a SQLite URI,
// so that '?', '#' and '%' in the path are escaped rather than read as
// parameters.
func backupDSN(path string, params ...string) string {
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath()
	for i, p := range params {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		dsn += sep + p
	}
	return dsn
}

func backupMarshal(info BackupInfo) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(backupFile{Version: backupFileVersion, Kind: backupFileKind, Spec: info}); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// backupSweep removes the work dirs of an interrupted BackupDB. They are
// never used: a crash before the rename leaves the previous backup in place,
// and a crash between moving the old backup aside and renaming the new one
// in leaves version without a backup, which is harmless because BackupDB
// only ever backs up the active version, whose live database is the newer
// truth and is still in place; the next run backs it up again.
func backupSweep(vdir string) error {
	leftovers, err := filepath.Glob(filepath.Join(vdir, backupWorkGlob))
	if err != nil {
		return err
	}
	for _, p := range leftovers {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// backupSwapDir renames the complete dir tmp to dst, replacing any dst.
// rename(2) cannot replace a non-empty directory, so the old dst is first
// moved aside and removed once the new one is in. The aside name reuses
// tmp's random suffix: unique, since backupSweep cleared every work dir
// before tmp was made.
func backupSwapDir(tmp, dst string) error {
	parent := filepath.Dir(dst)
	old := ""
	if _, err := os.Lstat(dst); err == nil {
		old = filepath.Join(parent, backupOldPrefix+strings.TrimPrefix(filepath.Base(tmp), backupTmpPrefix))
		if err := os.Rename(dst, old); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		if old != "" {
			// Put the previous backup back rather than leave none.
			_ = os.Rename(old, dst)
		}
		return err
	}
	if err := syncDir(parent); err != nil {
		return err
	}
	if old != "" {
		// The new backup is in place; a leftover is swept by the next run.
		_ = os.RemoveAll(old)
	}
	return nil
}

// backupLikeFile gives f the permission bits and owner of like. The agent
// usually runs as root and the app as its own user: a copy owned by root
// with the umask's mode would be a database the app cannot open.
func backupLikeFile(f *os.File, like fs.FileInfo) error {
	if err := f.Chmod(like.Mode().Perm()); err != nil {
		return err
	}
	want, ok := like.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if have, ok := fi.Sys().(*syscall.Stat_t); ok && have.Uid == want.Uid && have.Gid == want.Gid {
		return nil
	}
	if err := f.Chown(int(want.Uid), int(want.Gid)); err != nil {
		return fmt.Errorf("keep owner %d:%d of the database (run the agent as root or as the app's user): %w", want.Uid, want.Gid, err)
	}
	return nil
}

// LoadBackup reads and validates version's backup: backup.yaml must exist
// (it is written last, so without it the backup is missing or was
// interrupted), name this version, and describe the copy beside it, whose
// size and sha256 must match. Any failure is ErrBackup with the reason; a
// backup that was never taken is also fs.ErrNotExist.
func LoadBackup(t Tree, version string) (BackupInfo, error) {
	info, err := readBackupInfo(t, version)
	if err != nil || !info.HasDB() {
		return info, err
	}
	copyPath := t.BackupDBPath(version)
	sum, size, err := backupHashFile(copyPath)
	if err != nil {
		return BackupInfo{}, backupErr("backup for %s: %w", version, err)
	}
	if err := backupCheckCopy(copyPath, info, sum, size); err != nil {
		return BackupInfo{}, backupErr("backup for %s: %w", version, err)
	}
	return info, nil
}

// readBackupInfo is LoadBackup without reading the copy: backup.yaml is
// read and validated, and a backup recording no database must have no copy
// beside it. The copy's size and sha256 are not checked.
func readBackupInfo(t Tree, version string) (BackupInfo, error) {
	if err := checkVersion(version); err != nil {
		return BackupInfo{}, backupErr("load backup: %w", err)
	}
	path := t.BackupFilePath(version)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return BackupInfo{}, backupErr("no backup for %s: %s is missing (never taken, or interrupted before it completed): %w", version, path, err)
	}
	if err != nil {
		return BackupInfo{}, backupErr("backup for %s: %w", version, err)
	}
	var f backupFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return BackupInfo{}, backupErr("backup for %s: %s: %v", version, path, err)
	}
	info := f.Spec
	if err := backupValidate(f, version); err != nil {
		return BackupInfo{}, backupErr("backup for %s: %s: %v", version, path, err)
	}
	if !info.HasDB() {
		// "No database" with a copy beside it is a backup.yaml that does
		// not describe its directory; restoring would delete a database
		// that may have been meant to come back.
		copyPath := t.BackupDBPath(version)
		if _, err := os.Lstat(copyPath); !errors.Is(err, fs.ErrNotExist) {
			return BackupInfo{}, backupErr("backup for %s records no database, but %s exists", version, copyPath)
		}
	}
	return info, nil
}

// backupCheckCopy compares the size and sha256 of the copy at copyPath with
// what backup.yaml records.
func backupCheckCopy(copyPath string, info BackupInfo, sum string, size int64) error {
	if size != info.Size {
		return fmt.Errorf("%s is %d bytes, backup.yaml says %d (truncated or replaced)", copyPath, size, info.Size)
	}
	if sum != info.SHA256 {
		return fmt.Errorf("%s has sha256 %s, backup.yaml says %s (corrupted or replaced)", copyPath, sum, info.SHA256)
	}
	return nil
}

// backupValidate checks backup.yaml's fields, apart from the copy itself.
func backupValidate(f backupFile, version string) error {
	info := f.Spec
	switch {
	case f.Version != backupFileVersion || f.Kind != backupFileKind:
		return fmt.Errorf("want version %q and kind %q, have %q and %q", backupFileVersion, backupFileKind, f.Version, f.Kind)
	case info.Version != version:
		// Copied or renamed from another version's dir: its database is
		// in the other version's format.
		return fmt.Errorf("spec.version is %q, want %q (the backup's directory)", info.Version, version)
	case info.CreationTime.IsZero():
		return errors.New("spec.creation_time is missing")
	case !info.HasDB():
		if info.SHA256 != "" || info.Size != 0 {
			return errors.New("records no database (db_path empty) but has a sha256 or size")
		}
	case !filepath.IsAbs(info.DBPath):
		return fmt.Errorf("spec.db_path %q is not absolute", info.DBPath)
	case info.Size < 0:
		return fmt.Errorf("spec.size %d is negative", info.Size)
	default:
		if !isSHA256Hex(info.SHA256) {
			return fmt.Errorf("spec.sha256 %q is not a hex sha256", info.SHA256)
		}
	}
	return nil
}

func backupHashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// backupSidecars are the files SQLite keeps beside a database. A leftover
// one next to a restored database would be applied to it on the next open
// (a -wal is replayed over it, a hot -journal rolled back into it: neither
// records which database it belongs to) and undo the restore.
var backupSidecars = []string{"-wal", "-shm", "-journal"}

// RestoreDB puts version's backup back at dbPath; the caller must have
// stopped the app. The backup is validated as LoadBackup does: backup.yaml
// before anything is touched, the copy's size and sha256 on the bytes
// written beside the database, before it replaces anything. The database
// file is replaced atomically (the copy is written beside it, fsynced, and
// renamed over it) with the backup's bytes, mode and owner, after removing
// -wal, -shm and -journal files, so the result is byte-identical to the
// backed-up database. A backup recording "no database" removes dbPath and
// those files. A backup taken from another path is refused.
func RestoreDB(t Tree, version, dbPath string) error {
	return restoreDB(t, version, dbPath, "")
}

// restoreDB is RestoreDB with failpoints named fp+"/db-copy" (in the middle
// of the copy) and fp+"/db-sidecars" (sidecars removed, copy not yet
// renamed in).
func restoreDB(t Tree, version, dbPath, fp string) error {
	info, err := readBackupInfo(t, version)
	if err != nil {
		return fmt.Errorf("restore %s: %w", dbPath, err)
	}
	abs, err := filepath.Abs(dbPath)
	if err != nil {
		return backupErr("restore %s: %w", dbPath, err)
	}
	if info.HasDB() && info.DBPath != abs {
		return backupErr("restore %s: the backup for %s was taken from %s; refusing to restore it elsewhere", abs, version, info.DBPath)
	}
	// SQLite names the sidecars after the resolved file when the database
	// path is a symlink, and replacing the link itself would leave the real
	// database, with its sidecars, behind.
	target := abs
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		target = r
	}
	fail := func(err error) error {
		return backupErr("restore %s from the backup for %s: %w", target, version, err)
	}
	dir := filepath.Dir(target)
	if !info.HasDB() {
		// Sidecars first, then the database: a crash in between must not
		// leave a -wal that a database created later would replay.
		for _, p := range append(backupSidecarPaths(target), target) {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fail(err)
			}
		}
		if err := syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail(err)
		}
		return nil
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	tmp, err := backupCopyFile(t.BackupDBPath(version), dir, filepath.Base(target), info, fp+"/db-copy")
	if err != nil {
		return fail(err)
	}
	defer func() {
		if tmp != "" {
			_ = os.Remove(tmp)
		}
	}()
	// A crash after this point and before the rename leaves the newer
	// database without its sidecars; the caller's retry of the restore
	// replaces it anyway. The other order could leave the restored file
	// beside a newer -wal, which would silently win.
	for _, p := range backupSidecarPaths(target) {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail(err)
		}
	}
	failpoint(fp + "/db-sidecars")
	if err := os.Rename(tmp, target); err != nil {
		return fail(err)
	}
	tmp = ""
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	return nil
}

func backupSidecarPaths(db string) []string {
	out := make([]string, len(backupSidecars))
	for i, s := range backupSidecars {
		out[i] = db + s
	}
	return out
}

// backupCopyFile copies src into a new temp file in dir with src's mode and
// owner, fsyncs it, and checks that the bytes written have the size and
// sha256 that info records: this is the only check of the copy's content
// RestoreDB makes, on the very bytes it restores. It returns the temp file's
// path.
func backupCopyFile(src, dir, base string, info BackupInfo, fp string) (path string, err error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	like, err := in.Stat()
	if err != nil {
		return "", err
	}
	// A dot name that SQLite would never take for a database or sidecar.
	out, err := os.CreateTemp(dir, "."+base+".restore-*")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = os.Remove(out.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(failpointWriter(out, fp), h), in)
	if err != nil {
		return "", err
	}
	if err := backupCheckCopy(src, info, hex.EncodeToString(h.Sum(nil)), n); err != nil {
		return "", err
	}
	if err := backupLikeFile(out, like); err != nil {
		return "", err
	}
	if err := out.Sync(); err != nil {
		return "", err
	}
	if err := out.Close(); err != nil {
		return "", err
	}
	return out.Name(), nil
}

// DBOp is what an update does to the app's database.
type DBOp string

const (
	// DBKeep leaves the current database for the target version to use
	// (and migrate, if it is newer).
	DBKeep DBOp = "keep"
	// DBRestore replaces the database with the target version's backup.
	DBRestore DBOp = "restore"
	// DBRefuse stops the update: the target version cannot be given a
	// database it can read.
	DBRefuse DBOp = "refuse"
)

// DBAction is PlanDB's decision and why.
type DBAction struct {
	Op DBOp
	// Backup is the version whose backup to restore (DBRestore only).
	Backup string
	// Reason says why, for logs and status.
	Reason string
}

// PlanDB decides what a switch from version from to version to does to the
// app's database, by the rules of RFD 169 "Downgrades". history is
// update.yaml's version_history: the versions that were active before from,
// most recent first (versions rolled back by a failed install are not in
// it). backups says which versions have a valid backup (LoadBackup
// succeeds). Versions compare by semantic-version precedence.
//
//   - Downgrade (to older than from): restore to's backup, since to may not
//     read a database a newer version migrated; without a valid backup,
//     refuse (DBRefuse and an ErrBackup error).
//   - Roll forward to exactly the version rolled back from (to is newer and
//     is history's most recent entry): restore to's backup, which reverses
//     the rollback exactly ("v1 → v2 → v1 → v2: DB from v2 is recovered").
//     Without a valid backup the current database is kept and migrated:
//     an upgrade never refuses.
//   - Any other upgrade, including rolling forward past the version rolled
//     back from: keep the current database, even if to has an old backup
//     ("v1 → v2 → v1 → v3: DB from v1 is migrated directly to v3").
//   - First install (from "") or same precedence: keep.
func PlanDB(history []string, from, to string, backups map[string]bool) (DBAction, error) {
	refuse := func(err error) (DBAction, error) {
		return DBAction{Op: DBRefuse, Reason: err.Error()}, err
	}
	if err := checkVersion(to); err != nil {
		return refuse(fmt.Errorf("plan database for %q: %w", to, err))
	}
	if from == "" {
		return DBAction{Op: DBKeep, Reason: fmt.Sprintf("first install of %s: no earlier version's database to manage", to)}, nil
	}
	if err := checkVersion(from); err != nil {
		return refuse(fmt.Errorf("plan database from %q: %w", from, err))
	}
	switch c := rollout.CompareVersions(to, from); {
	case c == 0:
		return DBAction{Op: DBKeep, Reason: fmt.Sprintf("%s and %s are the same version", from, to)}, nil
	case c < 0:
		if backups[to] {
			return DBAction{Op: DBRestore, Backup: to,
				Reason: fmt.Sprintf("downgrade from %s to %s: restore %s's backup (%s may not read a database %s migrated)", from, to, to, to, from)}, nil
		}
		return refuse(backupErr("refusing to downgrade from %s to %s: no valid database backup for %s (%s may not read a database %s migrated)", from, to, to, to, from))
	}
	// An upgrade. Leading entries equal to from carry no transition (a
	// caller that already recorded from); skip them.
	prev := ""
	for _, h := range history {
		if h != from {
			prev = h
			break
		}
	}
	switch {
	case prev == to && backups[to]:
		return DBAction{Op: DBRestore, Backup: to,
			Reason: fmt.Sprintf("roll forward from %s to %s, the version rolled back from: restore %s's backup", from, to, to)}, nil
	case prev == to:
		return DBAction{Op: DBKeep,
			Reason: fmt.Sprintf("roll forward from %s to %s: no valid backup of %s, migrate the current database", from, to, to)}, nil
	case backups[to]:
		return DBAction{Op: DBKeep,
			Reason: fmt.Sprintf("upgrade from %s to %s: keep the current database; %s's backup predates the versions since and is not used", from, to, to)}, nil
	default:
		return DBAction{Op: DBKeep, Reason: fmt.Sprintf("upgrade from %s to %s: migrate the current database", from, to)}, nil
	}
}
