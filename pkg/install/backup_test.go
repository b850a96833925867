package install_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// What "byte-identical" means for a rollback: after BackupDB and RestoreDB
// the database file holds exactly the bytes the original's main file holds
// after `PRAGMA wal_checkpoint(TRUNCATE)` (in rollback-journal mode: the
// file as it is), the logical content is the same, and no -wal, -shm or
// -journal of the version that ran in between is left to be replayed.
func TestBackupRestoreRoundTripIsByteIdentical(t *testing.T) {
	for _, tc := range []struct {
		name    string
		journal string
		// frames leaves commits in the WAL at backup time; the original's
		// checkpointed bytes are then read after the app stops.
		frames bool
		empty  bool
	}{
		{name: "wal checkpointed, app running", journal: "wal"},
		{name: "wal with uncheckpointed frames, app running", journal: "wal", frames: true},
		{name: "rollback journal, app running", journal: "delete"},
		{name: "empty database file", empty: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := backupTree(t)
			dbPath := filepath.Join(t.TempDir(), "data", "app.db")
			if err := os.MkdirAll(filepath.Dir(dbPath), 0o755); err != nil {
				t.Fatal(err)
			}
			var app *sql.DB
			if tc.empty {
				// SQLite reads an empty file as an empty database.
				if err := os.WriteFile(dbPath, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				app = backupOpenApp(t, dbPath, tc.journal)
				backupSeed(t, app)
				if tc.journal == "wal" {
					backupExec(t, app, "PRAGMA wal_checkpoint(TRUNCATE)")
				}
				if tc.frames {
					backupExec(t, app, "PRAGMA wal_autocheckpoint = 0")
					backupExec(t, app, `UPDATE items SET name = name || '-edited' WHERE id % 7 = 0`)
					backupExec(t, app, `INSERT INTO kv VALUES('late', 'still in the wal')`)
					if fi, err := os.Stat(dbPath + "-wal"); err != nil || fi.Size() == 0 {
						t.Fatalf("want commits in the WAL at backup time: %v", err)
					}
				}
			}
			var want string
			if !tc.frames {
				want = backupSum(t, dbPath)
			}
			var wantDump []string
			if app != nil {
				wantDump = backupDump(t, app)
			} else {
				wantDump = backupDumpFile(t, dbPath)
			}

			info, err := install.BackupDB(t.Context(), tr, "1.0.0", dbPath, backupNow)
			if err != nil {
				t.Fatal(err)
			}
			// The installer stops the app; closing its last connection
			// checkpoints the WAL into the main file and removes it.
			if app != nil {
				if err := app.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if tc.frames {
				want = backupSum(t, dbPath)
			} else if diff := cmp.Diff(want, backupSum(t, dbPath)); diff != "" {
				t.Fatalf("backing up changed the live database (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, backupSum(t, tr.BackupDBPath("1.0.0"))); diff != "" {
				t.Errorf("backup copy is not the checkpointed original (-want +got):\n%s", diff)
			}

			// The new version migrates the database and writes to it.
			next := backupOpenApp(t, dbPath, "wal")
			backupExec(t, next, `CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, name TEXT)`)
			backupExec(t, next, `ALTER TABLE items ADD COLUMN v2_flag INTEGER DEFAULT 1`)
			backupExec(t, next, `INSERT INTO items(name) VALUES('written by 2.0.0')`)
			backupExec(t, next, `PRAGMA user_version = 2`)
			if err := next.Close(); err != nil {
				t.Fatal(err)
			}
			if backupSum(t, dbPath) == want {
				t.Fatal("the new version did not change the database; the test proves nothing")
			}

			if err := install.RestoreDB(tr, "1.0.0", dbPath); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, backupSum(t, dbPath)); diff != "" {
				t.Errorf("restored file bytes (-want +got):\n%s", diff)
			}
			if left := backupSidecarsLeft(t, dbPath); len(left) != 0 {
				t.Errorf("left beside the restored database: %v", left)
			}
			if diff := cmp.Diff(wantDump, backupDumpFile(t, dbPath)); diff != "" {
				t.Errorf("restored content (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, backupSum(t, dbPath)); diff != "" {
				t.Errorf("reading the restored database changed it (-want +got):\n%s", diff)
			}
			if info.Size != int64(len(readFile(t, dbPath))) {
				t.Errorf("info.Size = %d, restored file is %d bytes", info.Size, len(readFile(t, dbPath)))
			}
		})
	}
}

// The copy is one consistent snapshot while another connection keeps
// committing: every transaction of the writer adds a log row and bumps a
// counter, so a copy that mixed two states would break count(log) = n.
func TestBackupDBWhileAppWrites(t *testing.T) {
	for _, journal := range []string{"wal", "delete"} {
		t.Run(journal, func(t *testing.T) {
			tr := backupTree(t)
			dbPath := filepath.Join(t.TempDir(), "app.db")
			app := backupOpenApp(t, dbPath, journal)
			backupExec(t, app, `CREATE TABLE log(i INTEGER PRIMARY KEY, pad BLOB)`)
			backupExec(t, app, `CREATE TABLE counter(n INTEGER NOT NULL)`)
			// Enough pages that the copy takes a while.
			backupExec(t, app, `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i < 2000)
				INSERT INTO log(pad) SELECT randomblob(300) FROM s`)
			backupExec(t, app, `INSERT INTO counter VALUES(2000)`)

			stop := make(chan struct{})
			started := make(chan struct{})
			done := make(chan error, 1)
			var commits atomic.Int64
			go func() {
				done <- backupWriter(app, stop, started, &commits)
			}()
			select {
			case <-started:
			case err := <-done:
				t.Fatalf("writer: %v", err)
			}
			atStart := commits.Load()
			info, backupErr := install.BackupDB(t.Context(), tr, "1.0.0", dbPath, backupNow)
			atEnd := commits.Load()
			close(stop)
			if err := <-done; err != nil {
				t.Fatalf("writer: %v", err)
			}
			if backupErr != nil {
				t.Fatal(backupErr)
			}
			t.Logf("writer committed %d transactions during the backup", atEnd-atStart)

			if _, err := install.LoadBackup(tr, "1.0.0"); err != nil {
				t.Fatal(err)
			}
			cp := backupOpenCopy(t, tr.BackupDBPath("1.0.0"))
			if got := backupIntegrity(t, cp); got != "ok" {
				t.Fatalf("backup integrity_check: %s", got)
			}
			rows := backupQueryInt(t, cp, `SELECT count(*) FROM log`)
			n := backupQueryInt(t, cp, `SELECT n FROM counter`)
			if rows != n {
				t.Errorf("backup holds %d log rows but counter %d: not one snapshot", rows, n)
			}
			if floor := 2000 + atStart; rows < floor {
				t.Errorf("backup holds %d rows, want at least the %d committed before it started", rows, floor)
			}
			if got := backupIntegrity(t, app); got != "ok" {
				t.Errorf("live database integrity_check after the backup: %s", got)
			}
			if info.Size == 0 || info.DBPath != dbPath {
				t.Errorf("info = %+v", info)
			}
		})
	}
}

// backupWriter commits transactions on db until stop closes, closing
// started after the first.
func backupWriter(db *sql.DB, stop, started chan struct{}, commits *atomic.Int64) error {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO log(pad) VALUES(randomblob(300))`); err != nil {
			_ = tx.Rollback()
			return err
		}
		if _, err := tx.Exec(`UPDATE counter SET n = n + 1`); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if commits.Add(1) == 1 {
			close(started)
		}
	}
}

func TestBackupDBNoDatabase(t *testing.T) {
	tr := backupTree(t)
	dbPath := filepath.Join(t.TempDir(), "app.db")
	info, err := install.BackupDB(t.Context(), tr, "1.0.0", dbPath, backupNow)
	if err != nil {
		t.Fatal(err)
	}
	want := install.BackupInfo{Version: "1.0.0", CreationTime: backupNow}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("BackupDB (-want +got):\n%s", diff)
	}
	if info.HasDB() {
		t.Error("HasDB() = true for a missing database")
	}
	if _, err := os.Lstat(tr.BackupDBPath("1.0.0")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a copy exists for a missing database: %v", err)
	}
	got, err := install.LoadBackup(tr, "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadBackup (-want +got):\n%s", diff)
	}
	if _, err := os.Lstat(dbPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("backing up created the database: %v", err)
	}

	// The new version creates a database and leaves sidecars (a crash).
	app := backupOpenApp(t, dbPath, "wal")
	backupSeed(t, app)
	for _, s := range []string{"-wal", "-journal"} {
		if err := os.WriteFile(dbPath+s+".keep", nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"-wal", "-shm", "-journal"} {
		if err := os.WriteFile(dbPath+s, []byte("left by 2.0.0"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if err := install.RestoreDB(tr, "1.0.0", dbPath); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dbPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("restoring \"no database\" left %s: %v", dbPath, err)
	}
	if left := backupSidecarsLeft(t, dbPath); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
	// Files that merely share the prefix are not SQLite's and stay.
	if _, err := os.Stat(dbPath + "-wal.keep"); err != nil {
		t.Errorf("removed an unrelated file: %v", err)
	}
	// Restoring again is a no-op, not an error: a retried rollback.
	if err := install.RestoreDB(tr, "1.0.0", dbPath); err != nil {
		t.Errorf("second restore: %v", err)
	}
}

func TestBackupYAMLFormat(t *testing.T) {
	for _, tc := range []struct {
		name     string
		createDB bool
	}{
		{name: "database", createDB: true},
		{name: "no database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := backupTree(t)
			dbPath := filepath.Join(t.TempDir(), "app.db")
			if tc.createDB {
				backupSeed(t, backupOpenApp(t, dbPath, "wal"))
			}
			info, err := install.BackupDB(t.Context(), tr, "1.4.2", dbPath, backupNow)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := yaml.Unmarshal(readFile(t, tr.BackupFilePath("1.4.2")), &got); err != nil {
				t.Fatal(err)
			}
			spec := map[string]any{
				"version":       "1.4.2",
				"creation_time": backupNow,
				"db_path":       "",
				"sha256":        "",
				"size":          0,
			}
			if tc.createDB {
				spec["db_path"] = dbPath
				spec["sha256"] = info.SHA256
				spec["size"] = int(info.Size)
				spec["user_version"] = 1 // backupSeed's, as a migrating app sets it
				if len(info.SHA256) != 64 || info.Size == 0 {
					t.Errorf("info = %+v", info)
				}
			}
			want := map[string]any{"version": "v1", "kind": "db_backup", "spec": spec}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("backup.yaml (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackupDBReplacesBackupAtomically(t *testing.T) {
	tr := backupTree(t)
	dbPath := filepath.Join(t.TempDir(), "app.db")
	app := backupOpenApp(t, dbPath, "wal")
	backupSeed(t, app)
	first, err := install.BackupDB(t.Context(), tr, "1.0.0", dbPath, backupNow)
	if err != nil {
		t.Fatal(err)
	}
	backupExec(t, app, `INSERT INTO kv VALUES('after-first-backup', 'x')`)
	wantDump := backupDump(t, app)

	// Leftovers of interrupted runs, as a crash would leave them.
	for _, d := range []string{".backup-tmp-123", ".backup-old-456"} {
		if err := os.MkdirAll(filepath.Join(tr.VersionDir("1.0.0"), d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tr.VersionDir("1.0.0"), d, "app.db"), []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	later := backupNow.Add(time.Hour)
	second, err := install.BackupDB(t.Context(), tr, "1.0.0", dbPath, later)
	if err != nil {
		t.Fatal(err)
	}
	if second.SHA256 == first.SHA256 || !second.CreationTime.Equal(later) {
		t.Errorf("second backup %+v is not new (first %+v)", second, first)
	}
	got, err := install.LoadBackup(tr, "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(second, got); diff != "" {
		t.Errorf("LoadBackup (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantDump, backupDump(t, backupOpenCopy(t, tr.BackupDBPath("1.0.0")))); diff != "" {
		t.Errorf("backup content (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"backup"}, dirNames(t, tr.VersionDir("1.0.0"))); diff != "" {
		t.Errorf("version dir (-want +got):\n%s", diff)
	}
}

// A backup that fails leaves the previous one whole and no work dirs.
func TestBackupDBFailureKeepsPreviousBackup(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		version string
		db      func(t *testing.T, path string) // makes what lies at the db path
		wantIs  error
		want    string
	}{
		{
			name: "context canceled", ctx: canceled, version: "1.0.0",
			db: func(t *testing.T, path string) {}, wantIs: context.Canceled, want: "context canceled",
		},
		{
			name: "not a database", ctx: context.Background(), version: "1.0.0",
			db: func(t *testing.T, path string) {
				if err := os.WriteFile(path, []byte(strings.Repeat("not sqlite ", 500)), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: "not a database",
		},
		{
			name: "directory at the database path", ctx: context.Background(), version: "1.0.0",
			db: func(t *testing.T, path string) {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
			},
			want: "not a regular file",
		},
		{
			name: "hostile version", ctx: context.Background(), version: "../../etc",
			db: func(t *testing.T, path string) {}, wantIs: rollout.ErrBadVersion, want: "version",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := backupTree(t)
			dbPath := filepath.Join(t.TempDir(), "app.db")
			app := backupOpenApp(t, dbPath, "wal")
			backupSeed(t, app)
			if err := app.Close(); err != nil {
				t.Fatal(err)
			}
			prev, err := install.BackupDB(t.Context(), tr, "1.0.0", dbPath, backupNow)
			if err != nil {
				t.Fatal(err)
			}
			tc.db(t, dbPath)

			_, err = install.BackupDB(tc.ctx, tr, tc.version, dbPath, backupNow.Add(time.Hour))
			if !errors.Is(err, install.ErrBackup) || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("BackupDB error = %v, want ErrBackup (and %v) containing %q", err, tc.wantIs, tc.want)
			}
			got, err := install.LoadBackup(tr, "1.0.0")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(prev, got); diff != "" {
				t.Errorf("previous backup (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"backup"}, dirNames(t, tr.VersionDir("1.0.0"))); diff != "" {
				t.Errorf("version dir (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadBackupRejects(t *testing.T) {
	const v = "1.0.0"
	for _, tc := range []struct {
		name     string
		version  string
		noDB     bool // back up a missing database
		noBackup bool
		breakIt  func(t *testing.T, tr install.Tree)
		wantIs   error
		want     string
	}{
		{name: "never taken", noBackup: true, wantIs: fs.ErrNotExist, want: "backup.yaml is missing"},
		{
			name: "interrupted before backup.yaml", wantIs: fs.ErrNotExist, want: "interrupted",
			breakIt: func(t *testing.T, tr install.Tree) { backupRemove(t, tr.BackupFilePath(v)) },
		},
		{
			name: "copy corrupted", want: "corrupted",
			breakIt: func(t *testing.T, tr install.Tree) {
				b := readFile(t, tr.BackupDBPath(v))
				b[len(b)/2] ^= 0xff
				backupWrite(t, tr.BackupDBPath(v), b)
			},
		},
		{
			name: "copy truncated", want: "truncated",
			breakIt: func(t *testing.T, tr install.Tree) {
				backupWrite(t, tr.BackupDBPath(v), readFile(t, tr.BackupDBPath(v))[:4096])
			},
		},
		{
			name: "copy missing", wantIs: fs.ErrNotExist, want: "app.db",
			breakIt: func(t *testing.T, tr install.Tree) { backupRemove(t, tr.BackupDBPath(v)) },
		},
		{
			name: "another version's backup", want: `spec.version is "2.0.0", want "1.0.0"`,
			breakIt: func(t *testing.T, tr install.Tree) {
				backupEditYAML(t, tr, v, func(_, spec map[string]any) { spec["version"] = "2.0.0" })
			},
		},
		{
			name: "wrong kind", want: `kind "db_backup"`,
			breakIt: func(t *testing.T, tr install.Tree) {
				backupEditYAML(t, tr, v, func(doc, _ map[string]any) { doc["kind"] = "update_config" })
			},
		},
		{
			name: "not yaml", want: "yaml",
			breakIt: func(t *testing.T, tr install.Tree) { backupWrite(t, tr.BackupFilePath(v), []byte("spec: [\n")) },
		},
		{
			name: "empty backup.yaml", want: "want version",
			breakIt: func(t *testing.T, tr install.Tree) { backupWrite(t, tr.BackupFilePath(v), nil) },
		},
		{
			name: "no creation time", want: "creation_time",
			breakIt: func(t *testing.T, tr install.Tree) {
				backupEditYAML(t, tr, v, func(_, spec map[string]any) { delete(spec, "creation_time") })
			},
		},
		{
			name: "relative db_path", want: "not absolute",
			breakIt: func(t *testing.T, tr install.Tree) {
				backupEditYAML(t, tr, v, func(_, spec map[string]any) { spec["db_path"] = "app.db" })
			},
		},
		{
			name: "sha256 not a checksum", want: "not a hex sha256",
			breakIt: func(t *testing.T, tr install.Tree) {
				backupEditYAML(t, tr, v, func(_, spec map[string]any) { spec["sha256"] = "abc" })
			},
		},
		{
			name: "no database recorded but a copy present", want: "records no database",
			breakIt: func(t *testing.T, tr install.Tree) {
				backupEditYAML(t, tr, v, func(_, spec map[string]any) {
					spec["db_path"], spec["sha256"], spec["size"] = "", "", 0
				})
			},
		},
		{
			name: "no database recorded with a checksum", noDB: true, want: "has a sha256 or size",
			breakIt: func(t *testing.T, tr install.Tree) {
				backupEditYAML(t, tr, v, func(_, spec map[string]any) { spec["size"] = 10 })
			},
		},
		{name: "hostile version", version: "../../etc", wantIs: rollout.ErrBadVersion, want: "version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := backupTree(t)
			dbPath := filepath.Join(t.TempDir(), "app.db")
			if !tc.noDB {
				backupSeed(t, backupOpenApp(t, dbPath, "wal"))
			}
			if !tc.noBackup {
				if _, err := install.BackupDB(t.Context(), tr, v, dbPath, backupNow); err != nil {
					t.Fatal(err)
				}
				if _, err := install.LoadBackup(tr, v); err != nil {
					t.Fatalf("valid backup rejected: %v", err)
				}
			}
			if tc.breakIt != nil {
				tc.breakIt(t, tr)
			}
			version := v
			if tc.version != "" {
				version = tc.version
			}
			info, err := install.LoadBackup(tr, version)
			if !errors.Is(err, install.ErrBackup) || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadBackup = %+v, %v; want ErrBackup (and %v) containing %q", info, err, tc.wantIs, tc.want)
			}
			// RestoreDB validates the same way, and touches nothing.
			if !tc.noDB {
				before := backupSum(t, dbPath)
				if err := install.RestoreDB(tr, version, dbPath); !errors.Is(err, install.ErrBackup) {
					t.Errorf("RestoreDB = %v, want ErrBackup", err)
				}
				if diff := cmp.Diff(before, backupSum(t, dbPath)); diff != "" {
					t.Errorf("refused restore changed the database (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func backupWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func backupRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func TestRestoreDBRefusesAnotherDatabasePath(t *testing.T) {
	tr := backupTree(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	backupSeed(t, backupOpenApp(t, a, "wal"))
	if _, err := install.BackupDB(t.Context(), tr, "1.0.0", a, backupNow); err != nil {
		t.Fatal(err)
	}
	err := install.RestoreDB(tr, "1.0.0", b)
	if !errors.Is(err, install.ErrBackup) || !strings.Contains(err.Error(), "taken from "+a) {
		t.Fatalf("RestoreDB to another path = %v, want ErrBackup naming %s", err, a)
	}
	if _, err := os.Lstat(b); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("refused restore created %s: %v", b, err)
	}
}

// A -wal left by the newer version would be replayed over the restored file
// (a WAL does not record which database it belongs to), and a hot -journal
// rolled back into it: RestoreDB removes them.
func TestRestoreDBDropsTheNewerVersionsWAL(t *testing.T) {
	tr := backupTree(t)
	dbPath := filepath.Join(t.TempDir(), "app.db")
	app := backupOpenApp(t, dbPath, "wal")
	backupSeed(t, app)
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	wantDump := backupDumpFile(t, dbPath)
	want := backupSum(t, dbPath)
	if _, err := install.BackupDB(t.Context(), tr, "1.0.0", dbPath, backupNow); err != nil {
		t.Fatal(err)
	}

	// 2.0.0 commits into its WAL and crashes: capture the WAL while it is
	// open, then put it back after the (checkpointing) close.
	next := backupOpenApp(t, dbPath, "wal")
	backupExec(t, next, "PRAGMA wal_autocheckpoint = 0")
	backupExec(t, next, `INSERT INTO kv VALUES('from-2.0.0', 'newer')`)
	wal := readFile(t, dbPath+"-wal")
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
	backupWrite(t, dbPath+"-wal", wal)
	backupWrite(t, dbPath+"-journal", []byte("stale"))

	// Control: the same WAL beside a plain copy of the backup is replayed,
	// so the test would catch a restore that kept it.
	control := filepath.Join(t.TempDir(), "control.db")
	backupWrite(t, control, readFile(t, tr.BackupDBPath("1.0.0")))
	backupWrite(t, control+"-wal", wal)
	if got := backupDumpFile(t, control); !strings.Contains(strings.Join(got, "\n"), "from-2.0.0") {
		t.Fatal("control: the leftover WAL was not replayed; the test proves nothing")
	}

	if err := install.RestoreDB(tr, "1.0.0", dbPath); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, backupSum(t, dbPath)); diff != "" {
		t.Errorf("restored bytes (-want +got):\n%s", diff)
	}
	if left := backupSidecarsLeft(t, dbPath); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
	if diff := cmp.Diff(wantDump, backupDumpFile(t, dbPath)); diff != "" {
		t.Errorf("restored content (-want +got):\n%s", diff)
	}
}

// The app may run as its own user with its own mode; the restored file
// must be one it can open. (Owner is kept too; a test running as one user
// can only check the mode.)
func TestRestoreDBKeepsTheOriginalMode(t *testing.T) {
	tr := backupTree(t)
	dbPath := filepath.Join(t.TempDir(), "app.db")
	backupSeed(t, backupOpenApp(t, dbPath, "delete"))
	if err := os.Chmod(dbPath, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := install.BackupDB(t.Context(), tr, "1.0.0", dbPath, backupNow); err != nil {
		t.Fatal(err)
	}
	// The newer version replaced the file with another mode.
	backupRemove(t, dbPath)
	backupWrite(t, dbPath, nil)
	if err := os.Chmod(dbPath, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := install.RestoreDB(tr, "1.0.0", dbPath); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o640 {
		t.Errorf("restored mode = %v, want -rw-r-----", got)
	}
}

// A database reached through a symlink is restored into the file the link
// points to, and the link stays.
func TestRestoreDBThroughSymlink(t *testing.T) {
	tr := backupTree(t)
	dir := t.TempDir()
	target, link := filepath.Join(dir, "real", "app.db"), filepath.Join(dir, "app.db")
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	app := backupOpenApp(t, link, "wal")
	backupSeed(t, app)
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	want := backupSum(t, target)
	if _, err := install.BackupDB(t.Context(), tr, "1.0.0", link, backupNow); err != nil {
		t.Fatal(err)
	}
	next := backupOpenApp(t, link, "")
	backupExec(t, next, `INSERT INTO kv VALUES('from-2.0.0', 'newer')`)
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
	if err := install.RestoreDB(tr, "1.0.0", link); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(link); err != nil || got != target {
		t.Errorf("link = %q, %v; want it kept, pointing at %s", got, err, target)
	}
	if diff := cmp.Diff(want, backupSum(t, target)); diff != "" {
		t.Errorf("restored bytes (-want +got):\n%s", diff)
	}
}

func TestPlanDB(t *testing.T) {
	const v1, v2, v3 = "1.0.0", "2.0.0", "3.0.0"
	all := map[string]bool{v1: true, v2: true, v3: true}
	keep := install.DBAction{Op: install.DBKeep}
	restore := func(v string) install.DBAction { return install.DBAction{Op: install.DBRestore, Backup: v} }
	refuse := install.DBAction{Op: install.DBRefuse}
	for _, tc := range []struct {
		name    string
		history []string
		from    string
		to      string
		backups map[string]bool
		want    install.DBAction
		wantErr string
	}{
		// RFD 169 example 1: v1 -> v2 -> v1 -> v3, v2 broken. Each switch
		// backs up the version it leaves, so backups grow as we go.
		{name: "example 1 step 0: install v1", from: "", to: v1, want: keep},
		{name: "example 1 step 1: v1 -> v2 upgrades the v1 database", from: v1, to: v2, want: keep},
		{name: "example 1 step 2: v2 -> v1 downgrade restores v1's backup",
			history: []string{v1}, from: v2, to: v1, backups: map[string]bool{v1: true}, want: restore(v1)},
		{name: "example 1 step 3: v1 -> v3 migrates the v1 database, not v2's backup",
			history: []string{v2, v1}, from: v1, to: v3, backups: map[string]bool{v1: true, v2: true}, want: keep},

		// RFD 169 example 2: v1 -> v2 -> v1 -> v2 -> v3 (steps 0-2 as above).
		{name: "example 2 step 3: v1 -> v2 roll forward recovers v2's database",
			history: []string{v2, v1}, from: v1, to: v2, backups: map[string]bool{v1: true, v2: true}, want: restore(v2)},
		{name: "example 2 step 4: v2 -> v3 upgrades the recovered v2 database",
			history: []string{v1, v2, v1}, from: v2, to: v3, backups: map[string]bool{v1: true, v2: true}, want: keep},

		{name: "downgrade without a valid backup is refused",
			history: []string{v1}, from: v2, to: v1, backups: map[string]bool{v2: true}, want: refuse,
			wantErr: "refusing to downgrade from 2.0.0 to 1.0.0: no valid database backup for 1.0.0"},
		{name: "downgrade with no backups known is refused", from: v2, to: v1, want: refuse,
			wantErr: "no valid database backup for 1.0.0"},
		{name: "downgrade two versions back restores the older backup",
			history: []string{v2, v1}, from: v3, to: v1, backups: all, want: restore(v1)},
		{name: "roll forward to the rolled-back-from version without its backup migrates",
			history: []string{v2, v1}, from: v1, to: v2, backups: map[string]bool{v1: true}, want: keep},
		{name: "upgrade to a version whose backup predates a rollback keeps the current database",
			// v1 -> v3 -> v1 -> v2 -> v3: v3's backup is from before the
			// rollback to v1; the database has moved on through v2.
			history: []string{v1, v3, v1}, from: v2, to: v3, backups: all, want: keep},
		{name: "history repeating the active version is read past",
			history: []string{v1, v2}, from: v1, to: v2, backups: all, want: restore(v2)},
		{name: "same version keeps", history: []string{v1}, from: v2, to: v2, backups: all, want: keep},
		{name: "build metadata only keeps", from: "1.0.0+a", to: "1.0.0+b", want: keep},
		{name: "release after its candidate upgrades", from: "1.0.0-rc.1", to: v1, want: keep},
		{name: "candidate after its release is a downgrade", from: v1, to: "1.0.0-rc.1", want: refuse,
			wantErr: "no valid database backup for 1.0.0-rc.1"},
		{name: "bad target version", from: v1, to: "../x", want: refuse, wantErr: "version"},
		{name: "bad active version", from: "v1.0.0", to: v2, want: refuse, wantErr: "version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := install.PlanDB(tc.history, tc.from, tc.to, tc.backups)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(install.DBAction{}, "Reason")); diff != "" {
				t.Errorf("PlanDB (-want +got):\n%s", diff)
			}
			if got.Reason == "" {
				t.Error("no reason given")
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error = %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
			if tc.want.Op == install.DBRefuse && strings.Contains(tc.wantErr, "backup") && !errors.Is(err, install.ErrBackup) {
				t.Errorf("refusal %v is not ErrBackup", err)
			}
		})
	}
}

// The RFD 169 examples again, on a real database: every switch runs through
// PlanDB, BackupDB and RestoreDB as the installer will, and every version
// that runs writes a row "version@step", so the rows say whose database
// survived.
func TestDowngradeScenariosOnRealDatabase(t *testing.T) {
	const v1, v2, v3 = "1.0.0", "2.0.0", "3.0.0"
	type step struct {
		to       string
		want     install.DBOp
		wantRows []string
	}
	// Steps 1-3 are common to both examples: install v1, upgrade to v2
	// (which migrates v1's rows), downgrade to v1 (v2's write is gone with
	// the restore of v1's backup; v1 then writes again).
	common := []step{
		{to: v1, want: install.DBKeep, wantRows: []string{"1.0.0@1"}},
		{to: v2, want: install.DBKeep, wantRows: []string{"1.0.0@1", "2.0.0@2"}},
		{to: v1, want: install.DBRestore, wantRows: []string{"1.0.0@1", "1.0.0@3"}},
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{
			name: "v1 -> v2 -> v1 -> v3: the v1 database is migrated directly to v3",
			steps: append(common[:3:3],
				step{to: v3, want: install.DBKeep, wantRows: []string{"1.0.0@1", "1.0.0@3", "3.0.0@4"}}),
		},
		{
			name: "v1 -> v2 -> v1 -> v2 -> v3: the v2 database is recovered",
			steps: append(common[:3:3],
				// Back to exactly v2: its backup (rows as v2 left them)
				// replaces the rolled-back database, v1's later write
				// included.
				step{to: v2, want: install.DBRestore, wantRows: []string{"1.0.0@1", "2.0.0@2", "2.0.0@4"}},
				step{to: v3, want: install.DBKeep, wantRows: []string{"1.0.0@1", "2.0.0@2", "2.0.0@4", "3.0.0@5"}}),
		},
		{
			name: "v1 -> v3 -> v1 -> v2 -> v3: v3's stale backup is not used",
			steps: []step{
				{to: v1, want: install.DBKeep, wantRows: []string{"1.0.0@1"}},
				{to: v3, want: install.DBKeep, wantRows: []string{"1.0.0@1", "3.0.0@2"}},
				{to: v1, want: install.DBRestore, wantRows: []string{"1.0.0@1", "1.0.0@3"}},
				{to: v2, want: install.DBKeep, wantRows: []string{"1.0.0@1", "1.0.0@3", "2.0.0@4"}},
				{to: v3, want: install.DBKeep, wantRows: []string{"1.0.0@1", "1.0.0@3", "2.0.0@4", "3.0.0@5"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &backupHost{t: t, tree: backupTree(t), db: filepath.Join(t.TempDir(), "app.db")}
			for i, s := range tc.steps {
				from := h.active
				act, err := h.switchTo(s.to)
				if err != nil {
					t.Fatalf("step %d %q -> %s: %v", i+1, from, s.to, err)
				}
				if act.Op != s.want {
					t.Errorf("step %d %q -> %s: %s (%s), want %s", i+1, from, s.to, act.Op, act.Reason, s.want)
				}
				if diff := cmp.Diff(s.wantRows, h.rows()); diff != "" {
					t.Errorf("step %d %q -> %s: rows (-want +got):\n%s", i+1, from, s.to, diff)
				}
			}
		})
	}
}

// A downgrade to a version whose backup is gone or damaged is refused
// before anything is touched: no backup taken, database as it was.
func TestDowngradeRefusedOnRealDatabase(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T, tr install.Tree)
	}{
		{name: "backup removed", breakIt: func(t *testing.T, tr install.Tree) {
			if err := os.RemoveAll(tr.BackupDir("1.0.0")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "backup corrupted", breakIt: func(t *testing.T, tr install.Tree) {
			b := readFile(t, tr.BackupDBPath("1.0.0"))
			b[0] ^= 0xff
			backupWrite(t, tr.BackupDBPath("1.0.0"), b)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &backupHost{t: t, tree: backupTree(t), db: filepath.Join(t.TempDir(), "app.db")}
			for _, v := range []string{"1.0.0", "2.0.0"} {
				if _, err := h.switchTo(v); err != nil {
					t.Fatal(err)
				}
			}
			tc.breakIt(t, h.tree)
			before := backupSum(t, h.db)
			act, err := h.switchTo("1.0.0")
			if act.Op != install.DBRefuse || !errors.Is(err, install.ErrBackup) ||
				!strings.Contains(err.Error(), "refusing to downgrade from 2.0.0 to 1.0.0: no valid database backup for 1.0.0") {
				t.Fatalf("switch to 1.0.0 = %+v, %v; want a refusal naming 1.0.0", act, err)
			}
			if diff := cmp.Diff(before, backupSum(t, h.db)); diff != "" {
				t.Errorf("refused downgrade changed the database (-want +got):\n%s", diff)
			}
			if _, err := os.Lstat(h.tree.BackupDir("2.0.0")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("refused downgrade backed up 2.0.0: %v", err)
			}
			if diff := cmp.Diff([]string{"1.0.0@1", "2.0.0@2"}, h.rows()); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
		})
	}
}

// A writer that crashed mid-transaction (rollback-journal mode) leaves a
// hot journal and a half-written file. BackupDB opens the database as the
// app would, so SQLite rolls the journal back first: the backup is the last
// committed state, not the torn file.
func TestBackupDBRollsBackACrashedWritersJournal(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "app.db")
	app := backupOpenApp(t, dbPath, "delete")
	backupSeed(t, app)
	want := backupDump(t, app)
	// A tiny cache makes SQLite spill changed pages into the file before
	// commit, as a large transaction would.
	backupExec(t, app, "PRAGMA cache_size = 2")
	tx, err := app.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`UPDATE items SET body = randomblob(250), name = 'torn'`); err != nil {
		t.Fatal(err)
	}
	// The crash: the files as they are mid-transaction.
	crashed := filepath.Join(t.TempDir(), "app.db")
	backupWrite(t, crashed, readFile(t, dbPath))
	backupWrite(t, crashed+"-journal", readFile(t, dbPath+"-journal"))
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	// Control: the file alone is torn, so a copy of it would be too.
	if got := backupIntegrity(t, backupOpenCopy(t, crashed)); got == "ok" {
		t.Fatal("control: the crashed file is intact without its journal; the test proves nothing")
	}

	tr := backupTree(t)
	if _, err := install.BackupDB(t.Context(), tr, "1.0.0", crashed, backupNow); err != nil {
		t.Fatal(err)
	}
	cp := backupOpenCopy(t, tr.BackupDBPath("1.0.0"))
	if got := backupIntegrity(t, cp); got != "ok" {
		t.Fatalf("backup integrity_check: %s", got)
	}
	if diff := cmp.Diff(want, backupDump(t, cp)); diff != "" {
		t.Errorf("backup content (-want +got):\n%s", diff)
	}
	if left := backupSidecarsLeft(t, crashed); len(left) != 0 {
		t.Errorf("hot journal not rolled back: %v left", left)
	}
}

// TestBackupRefusesAnotherVersionsDatabase: a version's backup is never
// replaced by a database whose user_version differs from the one its backup
// recorded (a database another version migrated), and the old backup stays
// exactly as it was.
func TestBackupRefusesAnotherVersionsDatabase(t *testing.T) {
	tr := backupTree(t)
	dbPath := filepath.Join(t.TempDir(), "app.db")
	db := backupOpenApp(t, dbPath, "wal")
	backupSeed(t, db) // user_version 1
	if _, err := install.BackupDB(t.Context(), tr, "1.4.2", dbPath, backupNow); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, tr.BackupFilePath("1.4.2"))
	beforeDB := readFile(t, tr.BackupDBPath("1.4.2"))

	// Same version, same schema: replaced.
	backupExec(t, db, `INSERT INTO items (name) VALUES ('more')`)
	if _, err := install.BackupDB(t.Context(), tr, "1.4.2", dbPath, backupNow.Add(time.Minute)); err != nil {
		t.Fatalf("a backup of the same schema was refused: %v", err)
	}
	before = readFile(t, tr.BackupFilePath("1.4.2"))
	beforeDB = readFile(t, tr.BackupDBPath("1.4.2"))

	// A newer version migrated it: refused, nothing changed.
	backupExec(t, db, `PRAGMA user_version = 2`)
	_, err := install.BackupDB(t.Context(), tr, "1.4.2", dbPath, backupNow.Add(2*time.Minute))
	if !errors.Is(err, install.ErrBackup) || !strings.Contains(err.Error(), "user_version 2, but 1.4.2's backup has 1") {
		t.Fatalf("BackupDB of a database another version migrated = %v, want ErrBackup naming both user_versions", err)
	}
	if !bytes.Equal(before, readFile(t, tr.BackupFilePath("1.4.2"))) || !bytes.Equal(beforeDB, readFile(t, tr.BackupDBPath("1.4.2"))) {
		t.Error("the refused backup changed the existing one")
	}
}
