package install

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/renameio/v2"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// UpdateFileName is the updater's config and status file under the root.
const UpdateFileName = "update.yaml"

// UpdateFile is update.yaml: what the updater is told (Spec) and what it
// last did (Status). Status is what the agent heartbeats (all but RetryToken).
type UpdateFile struct {
	Version string     `yaml:"version"`
	Kind    string     `yaml:"kind"`
	Spec    UpdateSpec `yaml:"spec"`
	Status  Status     `yaml:"status"`

	// doc is the YAML as read, so that fields this build does not know
	// survive a rewrite.
	doc *yaml.Node
}

// UpdateSpec is the configuration part of update.yaml.
type UpdateSpec struct {
	// NATS is the bus URL the agent connects to.
	NATS string `yaml:"nats,omitempty"`
	// FindURLs are the controllers' HTTP find endpoints, used when the bus
	// is unreachable.
	FindURLs []string `yaml:"find_urls,omitempty"`
	// Group is the rollout group this host belongs to.
	Group string `yaml:"group"`
	// Hostname is the host name heartbeats carry (agentd --hostname);
	// empty: the system's.
	Hostname string `yaml:"hostname,omitempty"`
	// Site is where this host runs, for counts and halt reasons by site
	// (agentd --site); empty: the JetStream domain of the NATS server
	// agentd connects to, if it has one.
	Site string `yaml:"site,omitempty"`
	// URLTemplate is where releases are downloaded from.
	URLTemplate string `yaml:"url_template,omitempty"`
	// ReleaseRepo is the base URL of a TUF release repository (agentd
	// --release-repo): releases are the targets its verified metadata
	// names, and the trusted root is kept under the app's tree in tuf/.
	// It excludes URLTemplate and app.public_key.
	ReleaseRepo string `yaml:"release_repo,omitempty"`
	// Enabled allows automatic updates.
	Enabled bool `yaml:"enabled"`
	// App is how the app runs and is judged, as 'agentd enable' or
	// 'agentd run' was last told, so that later commands need not repeat it.
	App AppSpec `yaml:"app,omitempty"`
	// Labels are the host's own labels (agentd --label k=v), heartbeated
	// with the automatic ones (os, arch, kernel, which they may not set)
	// and those of LabelsFile; a group's selector over them moves the
	// host into that group (docs/agent.md, "Labels").
	Labels map[string]string `yaml:"labels,omitempty"`
	// LabelsFile is a file of key=value lines agentd re-reads every
	// heartbeat interval (agentd --labels-file, absolute): labels that
	// change without a restart. Labels win over it on the same key.
	LabelsFile string `yaml:"labels_file,omitempty"`
	// SelectedGroup is the group the host's labels moved it to (agentd
	// decides, with hysteresis); empty: Group, the one it was given.
	SelectedGroup string `yaml:"selected_group,omitempty"`
}

// ReservedLabels are the labels agentd sets itself (rollout.AutoLabels):
// --label and a labels file may not.
var ReservedLabels = rollout.AutoLabels

// ValidateOwnLabels checks labels given to agentd: each valid
// (rollout.ValidateLabel), none reserved, at most rollout.MaxLabels less
// the reserved ones.
func ValidateOwnLabels(l map[string]string) error {
	if n := rollout.MaxLabels - len(ReservedLabels); len(l) > n {
		return fmt.Errorf("%d labels, at most %d beside %s", len(l), n, strings.Join(ReservedLabels, ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(l)) {
		if slices.Contains(ReservedLabels, k) {
			return fmt.Errorf("label %s is agentd's own (it sets %s itself)", k, strings.Join(ReservedLabels, ", "))
		}
		if err := rollout.ValidateLabel(k, l[k]); err != nil {
			return err
		}
	}
	return nil
}

// AppSpec is the app part of update.yaml's spec: agentd's --app-name,
// --app, --app-arg, --systemd-unit, --systemctl, --bin-dir, --health-url,
// --health-command, --db and --public-key. Empty fields are not set
// (agentd's defaults).
type AppSpec struct {
	// Name is the app's name, which release signatures must name (a
	// fleet has one app today); "" means the one the release file's name
	// implies (AppNameFromFile: "app.tar.gz" → "app").
	Name string `yaml:"name,omitempty"`
	// Process is a binary in the active version's bin/ that agentd runs as
	// its child, with Args; SystemdUnit a unit it restarts instead. At most
	// one is set.
	Process     string   `yaml:"process,omitempty"`
	Args        []string `yaml:"args,omitempty"`
	SystemdUnit string   `yaml:"systemd_unit,omitempty"`
	// Systemctl is systemctl's absolute path (""; the first in
	// SystemPath). Never inside the bin dir.
	Systemctl string `yaml:"systemctl,omitempty"`
	// BinDir receives the links to the active version's binaries (absolute).
	BinDir string `yaml:"bin_dir,omitempty"`
	// HealthURL must answer 2xx and HealthCommand (run by /bin/sh -c) exit
	// 0 for a new version to be healthy.
	HealthURL     string `yaml:"health_url,omitempty"`
	HealthCommand string `yaml:"health_command,omitempty"`
	// DB is the app's SQLite database (absolute).
	DB string `yaml:"db,omitempty"`
	// PublicKey is the file (absolute) with the key that must have signed
	// every release checksum.
	PublicKey string `yaml:"public_key,omitempty"`
	// Installer is how the app is installed: rollout.InstallerTarball
	// (also "": releases downloaded from url_template) or
	// rollout.InstallerScript (Script's commands).
	Installer string `yaml:"installer,omitempty"`
	// Script is the script installer's commands (agentd --install-cmd,
	// --version-cmd, --script-timeout); set only with installer: script.
	Script ScriptSpec `yaml:"script,omitempty"`
}

// ScriptSpec is update.yaml's spec.app.script.
type ScriptSpec struct {
	// Install is run by /bin/sh -c to install FLEETWAVE_VERSION (or, with
	// FLEETWAVE_ACTION=rollback, to go back to it).
	Install string `yaml:"install,omitempty"`
	// Version is run by /bin/sh -c and prints the installed version
	// (nothing when none is).
	Version string `yaml:"version,omitempty"`
	// Timeout bounds one run of Install (0: DefaultScriptTimeout).
	Timeout time.Duration `yaml:"timeout,omitempty"`
}

// IsScript reports whether the app is installed by the script installer.
func (s AppSpec) IsScript() bool { return s.Installer == rollout.InstallerScript }

// validateScript checks the installer and its commands.
func (s AppSpec) validateScript() error {
	switch s.Installer {
	case "", rollout.InstallerTarball, rollout.InstallerScript:
	default:
		return fmt.Errorf("installer %.40q: want %s or %s", s.Installer, rollout.InstallerTarball, rollout.InstallerScript)
	}
	if !s.IsScript() {
		if s.Script != (ScriptSpec{}) {
			return errors.New("script is set but the installer is not script: set installer: script, or remove script")
		}
		return nil
	}
	switch {
	case strings.TrimSpace(s.Script.Install) == "":
		return errors.New("installer script needs script.install, the command that installs $FLEETWAVE_VERSION (agentd --install-cmd)")
	case strings.TrimSpace(s.Script.Version) == "":
		return errors.New("installer script needs script.version, the command that prints the installed version (agentd --version-cmd)")
	case strings.ContainsRune(s.Script.Install, 0) || strings.ContainsRune(s.Script.Version, 0):
		return errors.New("script commands cannot hold a NUL byte")
	case len(s.Script.Install) > MaxScriptLen || len(s.Script.Version) > MaxScriptLen:
		return fmt.Errorf("script commands longer than %d bytes: put them in a file and run that", MaxScriptLen)
	case s.Script.Timeout < 0:
		return fmt.Errorf("script.timeout %s: want a positive duration (0: %s)", s.Script.Timeout, DefaultScriptTimeout)
	case s.Process != "":
		return fmt.Errorf("installer script installs the app with the host's own command, and process %q runs a tarball release's binary: pass a systemd unit (or nothing) instead", s.Process)
	}
	return nil
}

// MaxScriptLen bounds each script command in update.yaml.
const MaxScriptLen = 4096

// Validate checks what agentd relies on: one way to run the app, a plain
// binary name, absolute paths.
func (s AppSpec) Validate() error {
	if s.Process != "" && s.SystemdUnit != "" {
		return errors.New("process and systemd_unit exclude each other: the app runs one way")
	}
	if s.Process != "" && !ValidBinaryName(s.Process) {
		return fmt.Errorf("process %q: want the name of a file in the release's bin/", s.Process)
	}
	if err := s.validateScript(); err != nil {
		return err
	}
	if s.Name != "" && !ValidAppName(s.Name) {
		return fmt.Errorf("name %q: want a lowercase app name ([a-z][a-z0-9-]{0,31})", s.Name)
	}
	for name, p := range map[string]string{"bin_dir": s.BinDir, "db": s.DB, "public_key": s.PublicKey, "systemctl": s.Systemctl} {
		if p != "" && !filepath.IsAbs(p) {
			return fmt.Errorf("%s %q: want an absolute path", name, p)
		}
	}
	if s.Systemctl != "" && s.BinDir != "" && filepath.Dir(filepath.Clean(s.Systemctl)) == filepath.Clean(s.BinDir) {
		return fmt.Errorf("systemctl %q is in the bin dir, where releases put their binaries: name the system's", s.Systemctl)
	}
	return nil
}

// MaxHostnameLen bounds spec.hostname, as the heartbeat bounds its
// hostname.
const MaxHostnameLen = 255

// ValidateHostname checks a host name to report (agentd --hostname): at
// most MaxHostnameLen bytes of printable runes, as a heartbeat's hostname
// must be ("" is the system's).
func ValidateHostname(h string) error {
	if len(h) > MaxHostnameLen {
		return fmt.Errorf("%d bytes, longer than %d", len(h), MaxHostnameLen)
	}
	if h != "" && strings.TrimSpace(h) == "" {
		return errors.New("only spaces")
	}
	return rollout.ValidatePrintable(h)
}

// ValidBinaryName reports whether name can be a file directly in a
// release's bin/.
func ValidBinaryName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// Status is the result part of update.yaml.
type Status struct {
	// StartTime is when the most recent update started.
	StartTime time.Time `yaml:"start_time,omitempty"`
	// StartVersion is the version that was active when it started.
	StartVersion string `yaml:"start_version,omitempty"`
	// ActiveVersion is the version linked and running.
	ActiveVersion string `yaml:"active_version,omitempty"`
	// VersionHistory lists earlier versions, most recent first.
	VersionHistory []string `yaml:"version_history,omitempty"`
	// Rollback is true when the active version was restored automatically.
	Rollback bool `yaml:"rollback"`
	// RollbackFrom is the version that failed and was rolled back.
	RollbackFrom string `yaml:"rollback_from,omitempty"`
	// Error is the last error met, empty when the last attempt succeeded.
	Error string `yaml:"error,omitempty"`
	// ErrorClass is Error's failure class (ClassOf), and ErrorCause a short
	// reason (Cause, e.g. "disk full"): both set and cleared with Error
	// (SetError). A file written before they existed has neither.
	ErrorClass FailureClass `yaml:"error_class,omitempty"`
	ErrorCause string       `yaml:"error_cause,omitempty"`
	// ErrorOutput is the app's last output lines at the failure that
	// rolled the host back (the app's stdout and stderr, its unit's
	// journal, or the failing health command's output; LastLines):
	// cleared with Error (SetError).
	ErrorOutput string `yaml:"error_output,omitempty"`
	// RetryToken is the last operator retry request (fleetctl retry) this
	// host took into account: it retried its rolled back version for it,
	// or was not rolled back from the target when it first saw it. A token
	// is never honoured twice, across restarts too. Not heartbeated.
	RetryToken string `yaml:"retry_token,omitempty"`
}

// SetError records a failure: msg as Error, with the class and cause of
// err. An empty msg clears all three.
func (st *Status) SetError(msg string, err error) {
	if msg == "" {
		st.Error, st.ErrorClass, st.ErrorCause, st.ErrorOutput = "", "", "", ""
		return
	}
	st.Error, st.ErrorClass, st.ErrorCause, st.ErrorOutput = msg, ClassOf(err), Cause(err), ""
}

// maxRetryToken bounds status.retry_token (a rollout.RetryRequest token).
const maxRetryToken = 64

const (
	updateFileVersion = "v1"
	updateFileKind    = "update_config"
)

// NewUpdateFile returns a fresh update.yaml for group.
func NewUpdateFile(group string) *UpdateFile {
	return &UpdateFile{Version: updateFileVersion, Kind: updateFileKind, Spec: UpdateSpec{Group: group}}
}

// LoadUpdateFile reads root/update.yaml. A missing file is fs.ErrNotExist; a
// file that is not a valid update.yaml is ErrCorrupt.
func LoadUpdateFile(root string) (*UpdateFile, error) {
	path := filepath.Join(root, UpdateFileName)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	f, err := parseUpdateFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// parseUpdateFile is LoadUpdateFile on the file's bytes; every error is
// ErrCorrupt.
func parseUpdateFile(data []byte) (*UpdateFile, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %v (fix or remove it; it is never overwritten automatically)", ErrCorrupt, err)
	}
	var f UpdateFile
	if err := doc.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	f.doc = &doc
	return &f, nil
}

// LoadOrCreateUpdateFile loads root/update.yaml, or writes a new one for
// group when none exists. A corrupt file is an error, never replaced.
func LoadOrCreateUpdateFile(root, group string) (*UpdateFile, error) {
	f, err := LoadUpdateFile(root)
	if errors.Is(err, fs.ErrNotExist) {
		f = NewUpdateFile(group)
		if err := f.Save(root); err != nil {
			return nil, err
		}
		return f, nil
	}
	return f, err
}

// Validate checks the fields fleetwave relies on.
func (f *UpdateFile) Validate() error {
	if f.Version != updateFileVersion || f.Kind != updateFileKind {
		return fmt.Errorf("want version %q and kind %q, have %q and %q", updateFileVersion, updateFileKind, f.Version, f.Kind)
	}
	if f.Spec.Group != "" {
		if err := rollout.ValidateGroupName(f.Spec.Group); err != nil {
			return fmt.Errorf("spec.group: %w", err)
		}
	}
	if f.Spec.Site != "" {
		if err := rollout.ValidateSite(f.Spec.Site); err != nil {
			return fmt.Errorf("spec.site: %w", err)
		}
	}
	if err := ValidateHostname(f.Spec.Hostname); err != nil {
		return fmt.Errorf("spec.hostname: %w", err)
	}
	if err := ValidateOwnLabels(f.Spec.Labels); err != nil {
		return fmt.Errorf("spec.labels: %w", err)
	}
	if f.Spec.LabelsFile != "" && !filepath.IsAbs(f.Spec.LabelsFile) {
		return fmt.Errorf("spec.labels_file %q: want an absolute path", f.Spec.LabelsFile)
	}
	if f.Spec.SelectedGroup != "" {
		if err := rollout.ValidateGroupName(f.Spec.SelectedGroup); err != nil {
			return fmt.Errorf("spec.selected_group: %w", err)
		}
	}
	if err := f.Spec.App.Validate(); err != nil {
		return fmt.Errorf("spec.app: %w", err)
	}
	if f.Spec.ReleaseRepo != "" {
		switch {
		case f.Spec.URLTemplate != "":
			return errors.New("spec.release_repo and spec.url_template exclude each other: releases come from one source")
		case f.Spec.App.PublicKey != "":
			return errors.New("spec.release_repo and spec.app.public_key exclude each other: a release repository's own keys sign its releases")
		case f.Spec.App.IsScript():
			return errors.New("spec.release_repo is for tarball releases; the script installer installs with the host's own command")
		}
	}
	if err := f.Status.validateError(); err != nil {
		return err
	}
	if len(f.Status.RetryToken) > maxRetryToken {
		return fmt.Errorf("status.retry_token longer than %d bytes", maxRetryToken)
	}
	for name, v := range map[string]string{
		"status.start_version":  f.Status.StartVersion,
		"status.active_version": f.Status.ActiveVersion,
		"status.rollback_from":  f.Status.RollbackFrom,
	} {
		if v == "" {
			continue
		}
		if err := rollout.ValidateVersion(v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// validateError checks that error_class and error_cause go with an error.
// A class this build does not know loads (a newer agentd may have written
// it before a downgrade: refusing the whole file would stop the host); the
// heartbeat leaves it out.
func (st Status) validateError() error {
	switch {
	case st.Error == "" && (st.ErrorClass != "" || st.ErrorCause != ""):
		return errors.New("status.error_class and error_cause go with an error, and error is empty")
	case len(st.ErrorCause) > MaxCauseLen:
		return fmt.Errorf("status.error_cause longer than %d bytes", MaxCauseLen)
	}
	return nil
}

// Save writes root/update.yaml atomically (write to a temp file, fsync,
// rename), keeping any field of the file as read that this build does not
// know.
func (f *UpdateFile) Save(root string) error {
	data, err := f.marshal()
	if err != nil {
		return fmt.Errorf("save %s: %w", UpdateFileName, err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("save %s: %w", UpdateFileName, err)
	}
	path := filepath.Join(root, UpdateFileName)
	if err := renameio.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	// The rename itself must be on disk before the install journal that
	// relies on it is ended.
	if err := syncDir(root); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}

// marshal validates f and encodes it as Save writes it: merged into the
// document as read, if any.
func (f *UpdateFile) marshal() ([]byte, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var fresh yaml.Node
	if err := fresh.Encode(f); err != nil {
		return nil, err
	}
	out := &fresh
	if f.doc != nil && len(f.doc.Content) == 1 {
		mergeMapping(f.doc.Content[0], &fresh, reflect.TypeFor[UpdateFile]())
		out = f.doc.Content[0]
		inlineDroppedAnchors(out, map[*yaml.Node]bool{}, map[*yaml.Node]*yaml.Node{})
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// mergeMapping writes every key of src into dst (both mapping nodes encoding
// a value of type t), recursing into nested structs. Keys of dst that t
// declares but src omits (empty values with omitempty) are removed; keys t
// does not declare are left alone, so a newer build's fields survive.
func mergeMapping(dst, src *yaml.Node, t reflect.Type) {
	if dst.Kind != yaml.MappingNode || src.Kind != yaml.MappingNode {
		*dst = *src
		return
	}
	fields := yamlFields(t)
	kept := dst.Content[:0:0]
	for i := 0; i+1 < len(dst.Content); i += 2 {
		k := dst.Content[i].Value
		if _, known := fields[k]; known && mappingIndex(src, k) < 0 {
			continue
		}
		kept = append(kept, dst.Content[i], dst.Content[i+1])
	}
	dst.Content = kept
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		j := mappingIndex(dst, k.Value)
		switch {
		case j < 0:
			dst.Content = append(dst.Content, k, v)
		case fields[k.Value] != nil && dst.Content[j+1].Kind == yaml.MappingNode && v.Kind == yaml.MappingNode:
			mergeMapping(dst.Content[j+1], v, fields[k.Value])
		default:
			// The comments on the value as read stay with it: a comment
			// after an empty value belongs to the key when read and to the
			// value once written, so otherwise each Save would move or drop it.
			old := dst.Content[j+1]
			v.HeadComment, v.LineComment, v.FootComment = old.HeadComment, old.LineComment, old.FootComment
			dst.Content[j+1] = v
		}
	}
}

// inlineDroppedAnchors walks n in document order and replaces each alias
// whose anchored node the merge dropped (a known field's value replaced or
// cleared, while an unknown field still refers to it) by that node as read,
// anchor included, so that later aliases to it still resolve. Without this
// Save writes an "unknown anchor" file that Load then calls corrupt.
// defined holds the anchored nodes met so far; moved, where a dropped one
// now is.
func inlineDroppedAnchors(n *yaml.Node, defined map[*yaml.Node]bool, moved map[*yaml.Node]*yaml.Node) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		if to, ok := moved[n.Alias]; ok {
			n.Alias = to
		}
		if defined[n.Alias] {
			return
		}
		head, line, foot := n.HeadComment, n.LineComment, n.FootComment
		target := n.Alias
		*n = *target
		n.HeadComment, n.LineComment, n.FootComment = head, line, foot
		moved[target] = n
	}
	if n.Anchor != "" {
		defined[n] = true
	}
	for _, c := range n.Content {
		inlineDroppedAnchors(c, defined, moved)
	}
}

// yamlFields maps the YAML keys of struct type t to the field's type when it
// is itself a struct we merge into (nil otherwise).
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		var nested reflect.Type
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]() {
			nested = f.Type
		}
		out[name] = nested
	}
	return out
}

func mappingIndex(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return i
		}
	}
	return -1
}
