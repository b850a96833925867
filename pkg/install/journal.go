package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/google/renameio/v2"
)

// The install journal: <root>/journal.json says which step of an install or
// a rollback may have started changing the host. Each step is written
// durably (a new file renamed over the old one, the file and its directory
// fsynced) before its effect can be observed, so after a crash at any
// instant the journal names the step that was running, and the host is in
// a state that step's rule knows how to complete or undo (recoveryRules).
// No journal means no install was under way. The file is JSON so an
// operator can read it (cat, jq) while debugging a host.
//
// What undoing needs is in the journal itself or derived from it: the
// version to go back to (From) and its database backup, taken at
// StepBackup, before anything of From's changed. Links need no record: the
// bin dir holds only our links (Tree.Link refuses foreign entries), so
// undoing a swap is linking From again.

// Step is a journal step: the last change to the host that may have begun.
type Step string

const (
	// StepFetch: downloading and extracting the target into
	// versions/<target>; nothing outside it changes.
	StepFetch Step = "fetch"
	// StepBackup: copying the live database into versions/<from>/backup
	// (built in a temp dir and renamed in; the live database is only read).
	StepBackup Step = "backup"
	// StepRestoreTarget: the app is stopped and the live database replaced
	// with the target's backup (a downgrade, or a roll forward to the
	// version rolled back from).
	StepRestoreTarget Step = "restore-target-db"
	// StepSwap: the bin dir's links are being pointed at the target.
	StepSwap Step = "swap"
	// StepStart: the target is being (re)started; from here it may have
	// run and migrated the database.
	StepStart Step = "start"
	// StepHealth: waiting for the target to be healthy.
	StepHealth Step = "health"
	// StepCommit: the target was healthy; recording it in update.yaml.
	StepCommit Step = "commit"
	// StepScript: the script installer's install command runs (it may
	// have changed the host partly or wholly).
	StepScript Step = "script"
	// StepRollback: going back to From (links, database, app) because of
	// Cause; Bad says whether the target is to be marked rolled back.
	StepRollback Step = "rollback"
	// StepUndone: a crash-interrupted install was undone. Only Attempts
	// matters: an install interrupted maxInterrupted times in a row is
	// marked rolled back rather than retried for ever.
	StepUndone Step = "undone"
)

// maxInterrupted is how many times an install of one version may be cut off
// by a crash (kill -9, power loss) before the version is treated as bad: a
// release that takes the host or the agent down with it must not be retried
// for ever.
const maxInterrupted = 3

// Journal is journal.json.
type Journal struct {
	V         int       `json:"v"`
	Step      Step      `json:"step"`
	Target    string    `json:"target"`
	From      string    `json:"from"`
	StartedAt time.Time `json:"started_at"`
	// Cause of a rollback, and whether the target is to blame (a failed
	// health check) or not (the install was cancelled or cut off).
	Cause string `json:"cause,omitempty"`
	Bad   bool   `json:"bad,omitempty"`
	// Class and Reason are Cause's ClassOf and Cause, for update.yaml's
	// error_class and error_cause ("" in a journal of an older agentd, or
	// of a crash: rollBack then says release when Bad, else
	// infrastructure).
	Class  FailureClass `json:"class,omitempty"`
	Reason string       `json:"reason,omitempty"`
	// Installer is rollout.InstallerScript for an install by the script
	// installer ("" for a tarball's): its steps are undone by the install
	// command, not by links.
	Installer string `json:"installer,omitempty"`
	// Output is the failure's last output lines (Status.ErrorOutput), for
	// a rollback a crash interrupted: the script installer's repair
	// records them as the uninterrupted rollback would have.
	Output string `json:"output,omitempty"`
	// Attempts counts crash-interrupted installs of Target in a row.
	Attempts int `json:"interrupted_attempts,omitempty"`
	// Download is how far step fetch's download had got when last
	// recorded (at most every Fetcher.ProgressEvery): for 'agentd status',
	// not for recovery.
	Download *DownloadProgress `json:"download,omitempty"`
	// UpdatedAt is when this record was written.
	UpdatedAt time.Time `json:"updated_at"`
}

const journalVersion = 1

// outcome is the failure class and short cause of the rollback j records:
// as recorded, or, when the journal has none (a crash, an older agentd),
// release when the target is to blame and infrastructure when not. A
// rollback that marks the target bad is always the release's.
func (j *Journal) outcome() (FailureClass, string) {
	switch {
	case j.Bad && j.Class == ClassRelease && j.Reason != "":
		return ClassRelease, clip(j.Reason, MaxCauseLen)
	case j.Bad:
		return ClassRelease, "rolled back"
	case j.Class == ClassInfrastructure && j.Reason != "":
		return ClassInfrastructure, clip(j.Reason, MaxCauseLen)
	}
	return ClassInfrastructure, "interrupted"
}

// clip cuts s to at most n bytes at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// JournalName is the journal's file name under the root.
const JournalName = "journal.json"

// JournalPath is the install journal.
func (t Tree) JournalPath() string { return filepath.Join(t.Root, JournalName) }

// LoadJournal reads the journal; a missing one is (nil, nil). A journal that
// does not parse is ErrCorrupt: the host's state is then unknown and an
// operator must look (it is never silently discarded).
func LoadJournal(t Tree) (*Journal, error) {
	data, err := os.ReadFile(t.JournalPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read install journal: %w", err)
	}
	const fix = "check the links, the app and the database by hand, then remove the file"
	var j Journal
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("%w: install journal %s: %v (%s)", ErrCorrupt, t.JournalPath(), err, fix)
	}
	if err := j.validate(); err != nil {
		return nil, fmt.Errorf("%w: install journal %s: %v (%s)", ErrCorrupt, t.JournalPath(), err, fix)
	}
	return &j, nil
}

func (j *Journal) validate() error {
	if j.V != journalVersion {
		return fmt.Errorf("journal version %d, want %d", j.V, journalVersion)
	}
	if _, ok := recoveryRules[j.Step]; !ok {
		return fmt.Errorf("unknown step %q", j.Step)
	}
	if err := checkVersion(j.Target); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if j.From != "" {
		if err := checkVersion(j.From); err != nil {
			return fmt.Errorf("from: %w", err)
		}
	}
	return nil
}

// writeJournal records j durably: a temp file fsynced and renamed over the
// journal, then the directory fsynced, so the step is on disk before the
// caller begins it.
func writeJournal(t Tree, j *Journal, now time.Time) error {
	j.V, j.UpdatedAt = journalVersion, now.UTC().Round(0)
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if err := renameio.WriteFile(t.JournalPath(), data, 0o644); err != nil {
		return fmt.Errorf("record install step %s: %w", j.Step, err)
	}
	if err := syncDir(t.Root); err != nil {
		return fmt.Errorf("record install step %s: %w", j.Step, err)
	}
	return nil
}

// removeJournal ends the journal durably.
func removeJournal(t Tree) error {
	if err := os.Remove(t.JournalPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("end install journal: %w", err)
	}
	return syncDir(t.Root)
}

// Recovery is what Repair does about a journal left by a crash.
type Recovery string

const (
	// RecoverForget: nothing outside versions/<target> (or a backup's work
	// dir) changed; sweep temp files and end the journal.
	RecoverForget Recovery = "forget"
	// RecoverUndo: the host may be partly on the target: stop the app,
	// link From again, restore From's database backup, start From. The
	// target is not blamed (the crash was not its fault) unless this is its
	// maxInterrupted-th interrupted attempt.
	RecoverUndo Recovery = "undo"
	// RecoverCommit: the target passed its health check: record it as the
	// active version and end the journal.
	RecoverCommit Recovery = "commit"
	// RecoverRollback: a rollback was under way: do it again from the start
	// (every part of it is idempotent) and record it as the journal says.
	RecoverRollback Recovery = "rollback"
	// RecoverNone: a finished record (StepUndone); nothing to do.
	RecoverNone Recovery = "none"
)

// recoveryRules is the rule for a crash at each step: the one place that
// decides how an interrupted install ends.
var recoveryRules = map[Step]Recovery{
	StepFetch:         RecoverForget,
	StepBackup:        RecoverForget,
	StepRestoreTarget: RecoverUndo,
	StepSwap:          RecoverUndo,
	StepScript:        RecoverUndo,
	StepStart:         RecoverUndo,
	StepHealth:        RecoverUndo,
	StepCommit:        RecoverCommit,
	StepRollback:      RecoverRollback,
	StepUndone:        RecoverNone,
}

// RecoveryFor is the rule for a crash at step.
func RecoveryFor(s Step) Recovery { return recoveryRules[s] }
