package install_test

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	_ "modernc.org/sqlite"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// backupNow is the clock reading every test backup is stamped with.
var backupNow = time.Date(2025, 3, 4, 5, 6, 7, 890, time.UTC)

// backupTestDSN is a SQLite URI for path with the given parameters.
func backupTestDSN(path string, params ...string) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + strings.Join(params, "&")
}

// backupOpenApp opens the database at path the way an app would: one
// connection (so a *sql.DB is one SQLite connection), a busy timeout, and
// the given journal mode ("" leaves the file's own).
func backupOpenApp(t *testing.T, path, journal string) *sql.DB {
	t.Helper()
	params := []string{"_pragma=busy_timeout(10000)"}
	if journal != "" {
		params = append(params, "_pragma=journal_mode("+journal+")")
	}
	db, err := sql.Open("sqlite", backupTestDSN(path, params...))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// backupOpenCopy opens a backup copy without touching it: immutable tells
// SQLite the file cannot change, so it takes no locks, makes no -wal or
// -shm, and never writes.
func backupOpenCopy(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", backupTestDSN(path, "mode=ro", "immutable=1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func backupExec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func backupQueryInt(t *testing.T, db *sql.DB, query string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func backupIntegrity(t *testing.T, db *sql.DB) string {
	t.Helper()
	var s string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&s); err != nil {
		t.Fatalf("integrity_check: %v", err)
	}
	return s
}

// backupDump is the logical content of a database: user_version, every
// schema object, and every row of every table.
func backupDump(t *testing.T, db *sql.DB) []string {
	t.Helper()
	out := []string{fmt.Sprintf("user_version=%d", backupQueryInt(t, db, "PRAGMA user_version"))}
	rows, err := db.Query("SELECT type, name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var typ, name, ddl string
		if err := rows.Scan(&typ, &name, &ddl); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s: %s", typ, name, ddl))
		if typ == "table" && !strings.HasPrefix(name, "sqlite_") {
			tables = append(tables, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	for _, table := range tables {
		// Ordered by every column: WITHOUT ROWID tables have no rowid.
		var n int64
		if err := db.QueryRow("SELECT count(*) FROM pragma_table_info(?)", table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		order := make([]string, n)
		for i := range order {
			order[i] = fmt.Sprint(i + 1)
		}
		rows, err := db.Query(fmt.Sprintf("SELECT * FROM %q ORDER BY %s", table, strings.Join(order, ", ")))
		if err != nil {
			t.Fatal(err)
		}
		cols, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			line := table + ":"
			for _, v := range vals {
				if b, ok := v.([]byte); ok {
					v = hex.EncodeToString(b)
				}
				line += fmt.Sprintf(" %v", v)
			}
			out = append(out, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return out
}

// backupDumpFile dumps the database at path, opened as an app would and
// closed again.
func backupDumpFile(t *testing.T, path string) []string {
	t.Helper()
	db := backupOpenApp(t, path, "")
	defer db.Close()
	return backupDump(t, db)
}

// backupSum identifies a file's exact bytes, short enough for cmp.Diff.
func backupSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return fmt.Sprintf("%d bytes sha256 %x", len(b), s)
}

// backupSidecarsLeft lists the SQLite files present beside the database.
func backupSidecarsLeft(t *testing.T, path string) []string {
	t.Helper()
	var left []string
	for _, s := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Lstat(path + s); err == nil {
			left = append(left, filepath.Base(path+s))
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	return left
}

// backupSeed gives a database some shape: two tables, an index, a blob
// column, and a user_version as a migrating app would set.
func backupSeed(t *testing.T, db *sql.DB) {
	t.Helper()
	backupExec(t, db, `CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, name TEXT NOT NULL, body BLOB)`)
	backupExec(t, db, `CREATE INDEX IF NOT EXISTS items_name ON items(name)`)
	backupExec(t, db, `CREATE TABLE IF NOT EXISTS kv(k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID`)
	backupExec(t, db, `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i < 300)
		INSERT INTO items(name, body) SELECT 'item-' || i, zeroblob(64) || randomblob(200) FROM s`)
	backupExec(t, db, `INSERT INTO kv VALUES('cert', 'issued-by-v1'), ('peer', 'node-7')`)
	backupExec(t, db, `PRAGMA user_version = 1`)
}

// backupTree is a fresh install tree.
func backupTree(t *testing.T) install.Tree {
	t.Helper()
	root := t.TempDir()
	return install.Tree{Root: filepath.Join(root, "var"), BinDir: filepath.Join(root, "bin")}
}

// backupEditYAML rewrites backup.yaml of v's backup through edit.
func backupEditYAML(t *testing.T, tr install.Tree, v string, edit func(doc, spec map[string]any)) {
	t.Helper()
	path := tr.BackupFilePath(v)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc, doc["spec"].(map[string]any))
	if b, err = yaml.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// backupHost plays agentd on one host for the downgrade scenarios: it
// switches versions the way the installer does (PlanDB, back up the active
// version, restore when told to) and then "runs" the new version, which
// migrates the database by writing a row naming itself and the step.
type backupHost struct {
	t       *testing.T
	tree    install.Tree
	db      string
	active  string
	history []string // most recent first, as update.yaml's version_history
	step    int
}

func (h *backupHost) switchTo(to string) (install.DBAction, error) {
	h.t.Helper()
	backups := map[string]bool{}
	for _, v := range []string{h.active, to} {
		if v == "" {
			continue
		}
		_, err := install.LoadBackup(h.tree, v)
		backups[v] = err == nil
	}
	act, err := install.PlanDB(h.history, h.active, to, backups)
	if err != nil {
		return act, err
	}
	if h.active != "" {
		if _, err := install.BackupDB(h.t.Context(), h.tree, h.active, h.db, backupNow); err != nil {
			h.t.Fatalf("back up %s: %v", h.active, err)
		}
		h.history = append([]string{h.active}, h.history...)
	}
	if act.Op == install.DBRestore {
		if err := install.RestoreDB(h.tree, act.Backup, h.db); err != nil {
			h.t.Fatalf("restore %s: %v", act.Backup, err)
		}
	}
	h.active = to
	h.step++
	h.run()
	return act, nil
}

// run starts the active version: it opens the database (creating it on
// first run), "migrates" it, and stops, which checkpoints the WAL.
func (h *backupHost) run() {
	h.t.Helper()
	db := backupOpenApp(h.t, h.db, "wal")
	backupExec(h.t, db, `CREATE TABLE IF NOT EXISTS writes(version TEXT NOT NULL, step INTEGER NOT NULL)`)
	backupExec(h.t, db, `INSERT INTO writes VALUES(?, ?)`, h.active, h.step)
	if err := db.Close(); err != nil {
		h.t.Fatal(err)
	}
}

// rows lists who wrote the database, as "version@step".
func (h *backupHost) rows() []string {
	h.t.Helper()
	db := backupOpenApp(h.t, h.db, "")
	defer db.Close()
	rows, err := db.Query(`SELECT version, step FROM writes ORDER BY rowid`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		var step int
		if err := rows.Scan(&v, &step); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s@%d", v, step))
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}
