// Command dbapp is the stand-in app of the crash tests: a SQLite app whose
// releases migrate the schema, as real apps do. Version N's schema is N
// (PRAGMA user_version); it migrates an older database forward at start and
// refuses a newer one, so a host left with the wrong database for its
// version cannot look healthy. It is not part of the product.
//
//	dbapp --db app.db --version 2.0.0 --schema 2 --mode good|write|crash|fill --marker ID
//
// good writes <db>.ready (holding its version) and runs until SIGTERM;
// write does the same and meanwhile commits a row to table writes every
// 2 ms, appending each committed row's id to <db>.acked once its commit
// returned (the test counts as lost every acked id the database lacks);
// crash migrates and exits 3 (a release that does not come up); fill
// migrates, then grows the database until the disk is full, and exits 3.
// --marker only labels the process for the test.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite"
)

// Rows is how many rows each schema step adds to its table.
const Rows = 100

func main() {
	db := flag.String("db", "", "database path")
	version := flag.String("version", "", "this release's version")
	schema := flag.Int("schema", 1, "this release's schema version")
	mode := flag.String("mode", "good", "good, write, crash or fill")
	flag.String("marker", "", "labels the process")
	flag.Parse()
	if err := run(*db, *version, *schema, *mode); err != nil {
		fmt.Fprintf(os.Stderr, "app %s: %v\n", *version, err)
		os.Exit(3)
	}
}

func run(path, version string, schema int, mode string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var have int
	if err := db.QueryRow("PRAGMA user_version").Scan(&have); err != nil {
		return err
	}
	if have > schema {
		return fmt.Errorf("database schema %d is newer than this version's %d: refusing to start", have, schema)
	}
	if have < schema {
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		for s := have + 1; s <= schema; s++ {
			if _, err := tx.Exec(fmt.Sprintf("CREATE TABLE t%d (id INTEGER PRIMARY KEY, note TEXT)", s)); err != nil {
				return err
			}
			for i := range Rows {
				if _, err := tx.Exec(fmt.Sprintf("INSERT INTO t%d (note) VALUES (?)", s), fmt.Sprintf("row %d of schema %d", i, s)); err != nil {
					return err
				}
			}
		}
		if _, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", schema)); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	fmt.Printf("app %s running on schema %d\n", version, schema)
	switch mode {
	case "good", "write":
		// Ready: <db>.ready names the version that is up (the health
		// command compares it with the version linked).
		tmp := path + ".ready.tmp"
		if err := os.WriteFile(tmp, []byte(version), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, path+".ready"); err != nil {
			return err
		}
		if mode == "write" {
			return write(ctx, db, path+".acked")
		}
	case "crash":
		return fmt.Errorf("cannot start (simulated broken release)")
	case "fill":
		if _, err := db.Exec("CREATE TABLE IF NOT EXISTS junk (b BLOB)"); err != nil {
			return err
		}
		blob := []byte(strings.Repeat("x", 64<<10))
		for {
			if _, err := db.Exec("INSERT INTO junk (b) VALUES (?)", blob); err != nil {
				return fmt.Errorf("filled the disk: %w", err)
			}
		}
	}
	<-ctx.Done()
	return nil
}

// write commits a row every 2 ms until ctx ends, appending each committed
// row's id to acked.
func write(ctx context.Context, db *sql.DB, acked string) error {
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS writes (id INTEGER PRIMARY KEY, at TEXT)"); err != nil {
		return err
	}
	f, err := os.OpenFile(acked, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := db.ExecContext(ctx, "INSERT INTO writes (at) VALUES (?)", time.Now().UTC().Format(time.RFC3339Nano))
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintln(f, id); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
