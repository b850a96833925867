package agentd

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Labels (issue 28, point 8; docs/agent.md, "Labels"). A host's labels are
// heartbeated, and a group with a selector over them takes the host
// (selector.go). They come from three places, later ones winning on a key:
//
//   - a labels file (--labels-file, saved): key=value lines, re-read every
//     heartbeat interval, so that configuration management changes them
//     without restarting agentd;
//   - --label k=v (repeatable, saved in update.yaml spec.labels; given
//     again, the saved set is replaced; --label= clears it);
//   - agentd's own: os and arch (Go's GOOS and GOARCH) and kernel (the
//     uname release), which neither of the others may set.

// maxLabelsFile bounds the labels file agentd reads.
const maxLabelsFile = 64 << 10

// parseLabelFlags reads --label values: k=v each; a single empty value
// clears the saved labels (nil, true).
func parseLabelFlags(flags []string) (rollout.Labels, error) {
	if len(flags) == 1 && flags[0] == "" {
		return nil, nil
	}
	out := rollout.Labels{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, cliutil.Usagef("--label %q: want key=value (--label= clears the saved labels)", f)
		}
		if _, dup := out[k]; dup {
			return nil, cliutil.Usagef("--label %s given twice", k)
		}
		out[k] = v
	}
	if err := install.ValidateOwnLabels(out); err != nil {
		return nil, cliutil.Usagef("--label: %v", err)
	}
	return out, nil
}

// parseLabelsFile reads a labels file: key=value lines; blank lines and
// lines starting with '#' are skipped; the same rules as --label.
func parseLabelsFile(r io.Reader) (rollout.Labels, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxLabelsFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxLabelsFile {
		return nil, fmt.Errorf("larger than %d bytes", maxLabelsFile)
	}
	out := rollout.Labels{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxLabelsFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(strings.TrimSuffix(sc.Text(), "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: want key=value", n)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("line %d: label %s given twice", n, truncateText(k, 70))
		}
		if err := rollout.ValidateLabel(k, v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := install.ValidateOwnLabels(out); err != nil {
		return nil, err
	}
	return out, nil
}

// readLabelsFile reads path (a missing file has no labels: it may be
// written later).
func readLabelsFile(path string) (rollout.Labels, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l, err := parseLabelsFile(f)
	if err != nil {
		return nil, fmt.Errorf("labels file %s: %w", path, err)
	}
	return l, nil
}

// autoLabels are agentd's own labels: os, arch and kernel.
func autoLabels() rollout.Labels {
	l := rollout.Labels{"os": runtime.GOOS, "arch": runtime.GOARCH}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		if k := labelValue(unix.ByteSliceToString(u.Release[:])); k != "" {
			l["kernel"] = k
		}
	}
	return l
}

// labelValue makes s a valid label value: what is not printable ASCII
// without spaces becomes '_', cut to rollout.MaxLabelValueLen.
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c <= ' ' || c >= 0x7f {
			b[i] = '_'
		}
	}
	if len(b) > rollout.MaxLabelValueLen {
		b = b[:rollout.MaxLabelValueLen]
	}
	return string(b)
}

// effectiveLabels lays --label's over the file's over the automatic ones.
func effectiveLabels(auto, file, own rollout.Labels) rollout.Labels {
	out := maps.Clone(auto)
	if out == nil {
		out = rollout.Labels{}
	}
	maps.Copy(out, file)
	maps.Copy(out, own)
	return out
}

// refreshLabels recomputes the host's labels, re-reading the labels file,
// and reports whether they changed. A file that cannot be read or breaks
// the rules keeps the labels it last gave (logged once per error).
func (a *Agent) refreshLabels() bool {
	a.mu.Lock()
	own, path := maps.Clone(a.update.Spec.Labels), a.update.Spec.LabelsFile
	fileLabels := a.fileLabels
	a.mu.Unlock()
	var fileErr string
	if path != "" {
		l, err := readLabelsFile(path)
		if err != nil {
			fileErr = err.Error()
		} else {
			fileLabels = l
		}
	} else {
		fileLabels = nil
	}
	set, err := heartbeat.MakeLabelSet(effectiveLabels(a.autoLabels, fileLabels, own))
	a.mu.Lock()
	defer a.mu.Unlock()
	if fileErr != a.labelsErr {
		a.labelsErr = fileErr
		if fileErr != "" {
			a.o.Log.Error("cannot use the labels file; keeping the labels it last gave", slog.String("err", fileErr))
		} else if path != "" {
			a.o.Log.Info("labels file readable again", slog.String("path", path))
		}
	}
	if err != nil {
		// The file's and --label's together are more than MaxLabels.
		if msg := err.Error(); msg != a.labelsErr {
			a.labelsErr = msg
			a.o.Log.Error("labels refused; keeping the last", slog.Any("err", err))
		}
		return false
	}
	a.fileLabels = fileLabels
	if set.Equal(a.labels) {
		return false
	}
	if !a.labels.IsZero() {
		a.o.Log.Info("labels changed", slog.String("from", a.labels.String()), slog.String("to", set.String()))
	}
	a.labels = set
	return true
}

// Labels are the host's labels as heartbeats carry them.
func (a *Agent) Labels() heartbeat.LabelSet {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.labels
}

// resolveLabels lays --label and --labels-file over what spec saved, and
// checks them: a labels file given now must be readable and valid.
func (o *Options) resolveLabels(spec *install.UpdateSpec) error {
	if o.Labels != nil || o.given != nil && o.given("label") {
		l, err := parseLabelFlags(o.Labels)
		if err != nil {
			return err
		}
		spec.Labels = l
	}
	if o.LabelsFile != "" || o.given != nil && o.given("labels-file") {
		path := o.LabelsFile
		if path != "" {
			abs, err := filepath.Abs(path)
			if err != nil {
				return fmt.Errorf("--labels-file: %w", err)
			}
			path = abs
			if _, err := os.Stat(path); err != nil {
				return cliutil.Usagef("--labels-file %s: %v (create it, even empty: agentd re-reads it every heartbeat interval)", path, err)
			}
			if _, err := readLabelsFile(path); err != nil {
				return cliutil.UsageError{Err: err}
			}
		}
		spec.LabelsFile = path // --labels-file= clears it
	}
	if spec.LabelsFile != "" || len(spec.Labels) > 0 {
		file, _ := readLabelsFile(spec.LabelsFile)
		if _, err := heartbeat.MakeLabelSet(effectiveLabels(autoLabels(), file, spec.Labels)); err != nil {
			return cliutil.Usagef("labels: %v (--label and the labels file together)", err)
		}
	}
	return nil
}

// labelsError is the labels file's last error ("" when it reads).
func (a *Agent) labelsError() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.labelsErr
}
