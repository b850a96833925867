package install

import (
	"fmt"
	"path/filepath"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Tree is a host's install tree (DESIGN §4):
//
//	<root>/update.yaml            config + status
//	<root>/agent_id               the update id
//	<root>/lock                   flock: one updater at a time
//	<root>/links.yaml             the bin dir entries agentd created
//	<root>/app.pid                the supervised app's process group (ProcessRunner)
//	<root>/journal.json           the install journal: the step under way (journal.go)
//	<root>/space.reserve          1 MiB released to record a rollback on a full disk
//	<root>/versions/<v>/bin/…     an extracted release
//	<root>/versions/<v>/sha256    written last: the extraction is complete
//	<root>/versions/<v>/backup/   the app's database as it was under <v>
//	<bin_dir>/<name> -> <root>/versions/<v>/bin/<name>
//
// Root and BinDir must be absolute: the links hold paths into Root.
type Tree struct {
	Root   string
	BinDir string
}

// VersionsDir holds one directory per extracted version.
func (t Tree) VersionsDir() string { return filepath.Join(t.Root, "versions") }

// VersionDir is where version v is extracted.
func (t Tree) VersionDir(v string) string { return filepath.Join(t.VersionsDir(), v) }

// MarkerPath is the sha256 marker of version v: present only once v's
// extraction is complete, and holding the release tarball's checksum.
func (t Tree) MarkerPath(v string) string { return filepath.Join(t.VersionDir(v), markerName) }

// BackupDir holds the database backup taken while v was the active version.
func (t Tree) BackupDir(v string) string { return filepath.Join(t.VersionDir(v), backupName) }

// LockPath is the updater lock file.
func (t Tree) LockPath() string { return filepath.Join(t.Root, "lock") }

// AppPIDPath records the process group of the app agentd supervises
// (ProcessRunner.PIDFile).
func (t Tree) AppPIDPath() string { return filepath.Join(t.Root, AppPIDName) }

// AppPIDName is the supervised app's record under the root.
const AppPIDName = "app.pid"

// ScriptPIDName is the running install command's record under the root
// (the script installer: Script.PIDFile).
const ScriptPIDName = "script.pid"

// ScriptPIDPath is the running install command's record.
func (t Tree) ScriptPIDPath() string { return filepath.Join(t.Root, ScriptPIDName) }

// checkVersion guards every path built from a version string: a version
// from the network must never become "../../etc".
func checkVersion(v string) error {
	if err := rollout.ValidateVersion(v); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
}
