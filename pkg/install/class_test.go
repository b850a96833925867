package install_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/install"
)

func TestClassOf(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("install 1.2.0: fetch: %w", err) }
	tests := []struct {
		name      string
		err       error
		class     install.FailureClass
		wantCause string
	}{
		{"nil", nil, "", ""},
		{"checksum", wrap(install.ErrBadChecksum), install.ClassArtifact, "checksum mismatch"},
		{"repository", wrap(install.ErrRepository), install.ClassInfrastructure, "release repository"},
		{"repository expired", wrap(&install.RepositoryError{Reason: "expired", Err: errors.New("timestamp expired")}), install.ClassInfrastructure, "release repository: expired"},
		// The repository is at fault whatever the transport said.
		{"repository wrong file", wrap(&install.RepositoryError{Reason: "wrong file", Err: fmt.Errorf("%w: body longer", install.ErrDownload)}), install.ClassInfrastructure, "release repository: wrong file"},
		{"repository long reason", wrap(&install.RepositoryError{Reason: strings.Repeat("x", 100)}), install.ClassInfrastructure, "release repository: " + strings.Repeat("x", install.MaxCauseLen-len("release repository: "))},
		{"signature", wrap(install.ErrBadSignature), install.ClassArtifact, "bad signature"},
		{"signed the old way", wrap(fmt.Errorf("%w: %w", install.ErrBadSignature, install.ErrOldSignature)), install.ClassArtifact, "signed the old way (re-sign)"},
		{"signed for another release", wrap(fmt.Errorf("%w: %w", install.ErrBadSignature, install.ErrOtherRelease)), install.ClassArtifact, "signed for another release"},
		{"ships a program agentd runs", wrap(install.ErrShadowsTool), install.ClassRelease, "ships a program agentd runs"},
		{"hostile archive", wrap(fmt.Errorf("%w: entry %q: escapes", install.ErrHostileArchive, "../x")), install.ClassArtifact, "archive rejected"},
		{"invalid tree", wrap(fmt.Errorf("%w: %w: no bin/", install.ErrHostileArchive, install.ErrInvalidRelease)), install.ClassRelease, "invalid release tree"},
		{"unhealthy", wrap(install.ErrUnhealthy), install.ClassRelease, "unhealthy"},
		{"no space", wrap(install.ErrNoSpace), install.ClassInfrastructure, "disk full"},
		{"ENOSPC", wrap(&fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), install.ClassInfrastructure, "disk full"},
		{"EDQUOT", wrap(&os.SyscallError{Syscall: "write", Err: syscall.EDQUOT}), install.ClassInfrastructure, "disk full"},
		{"HTTP 503", wrap(&install.StatusError{Method: "HEAD", URL: "https://r/x", Code: 503, Status: "503 Service Unavailable"}), install.ClassInfrastructure, "download failed (HTTP 503)"},
		{"HTTP 404", wrap(&install.StatusError{Method: "GET", URL: "https://r/x", Code: 404, Status: "404 Not Found"}), install.ClassInfrastructure, "download failed (HTTP 404)"},
		{"download", wrap(fmt.Errorf("%w: GET x: truncated", install.ErrDownload)), install.ClassInfrastructure, "download failed"},
		{"stalled", wrap(fmt.Errorf("%w: GET x: %w", install.ErrDownload, install.ErrStalled)), install.ClassInfrastructure, "download stalled"},
		{"deadline", wrap(fmt.Errorf("%w: GET x: %w", install.ErrDownload, install.ErrDeadline)), install.ClassInfrastructure, "download deadline passed"},
		{"locked", &install.LockedError{Path: "/r/lock"}, install.ClassInfrastructure, "root lock held"},
		{"backup", wrap(install.ErrBackup), install.ClassInfrastructure, "database backup"},
		{"not ours", wrap(install.ErrNotOurs), install.ClassInfrastructure, "bin dir entry not ours"},
		{"corrupt", install.ErrCorrupt, install.ClassInfrastructure, "corrupt state file"},
		{"abandoned", wrap(install.ErrAbandoned), install.ClassInfrastructure, "abandoned (target changed)"},
		{"context deadline", wrap(context.DeadlineExceeded), install.ClassInfrastructure, "interrupted"},
		{"context canceled", wrap(context.Canceled), install.ClassInfrastructure, "interrupted"},
		{"read-only fs", wrap(&fs.PathError{Op: "open", Path: "/x", Err: syscall.EROFS}), install.ClassInfrastructure, "disk error"},
		{"network", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), install.ClassInfrastructure, "network error"},
		// Unknown: counts against the release (docs/agent.md says why).
		{"unknown", wrap(errors.New("restart: exit status 1")), install.ClassRelease, "failed"},
		// The most specific cause wins over a wrapper's.
		{"unhealthy beats canceled", fmt.Errorf("%w: %w", install.ErrUnhealthy, context.Canceled), install.ClassRelease, "unhealthy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := install.ClassOf(tc.err); got != tc.class {
				t.Errorf("ClassOf(%v) = %q, want %q", tc.err, got, tc.class)
			}
			got := install.Cause(tc.err)
			if got != tc.wantCause {
				t.Errorf("Cause(%v) = %q, want %q", tc.err, got, tc.wantCause)
			}
			if len(got) > install.MaxCauseLen {
				t.Errorf("Cause %q longer than MaxCauseLen", got)
			}
		})
	}
}

// TestStatusErrorText: the typed HTTP status error reads as the text it
// replaced, and is ErrDownload.
func TestStatusErrorText(t *testing.T) {
	t.Parallel()
	err := error(&install.StatusError{Method: "HEAD", URL: "https://r/1.2.0.tar.gz", Code: 503, Status: "503 Service Unavailable"})
	if want := "download failed: HEAD https://r/1.2.0.tar.gz: 503 Service Unavailable"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if !errors.Is(err, install.ErrDownload) {
		t.Error("not ErrDownload")
	}
}

// TestUpdateFileErrorClass: error_class and error_cause load, are checked,
// and a file without them (written before they existed) still loads.
func TestUpdateFileErrorClass(t *testing.T) {
	t.Parallel()
	const head = "version: v1\nkind: update_config\nspec:\n  group: prod\nstatus:\n"
	tests := []struct {
		name    string
		status  string
		want    install.Status
		wantErr string
	}{
		{name: "old file", status: "  active_version: 1.2.3\n  error: boom\n", want: install.Status{ActiveVersion: "1.2.3", Error: "boom"}},
		{name: "with class", status: "  error: boom\n  error_class: infrastructure\n  error_cause: disk full\n",
			want: install.Status{Error: "boom", ErrorClass: install.ClassInfrastructure, ErrorCause: "disk full"}},
		// A newer agentd's class, before a downgrade: loads.
		{name: "unknown class", status: "  error: boom\n  error_class: weather\n", want: install.Status{Error: "boom", ErrorClass: "weather"}},
		{name: "class without error", status: "  error_class: artifact\n", wantErr: "go with an error"},
		{name: "cause without error", status: "  error_cause: disk full\n", wantErr: "go with an error"},
		{name: "cause too long", status: "  error: boom\n  error_class: release\n  error_cause: " + strings.Repeat("x", install.MaxCauseLen+1) + "\n", wantErr: "error_cause longer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := install.ParseUpdateFile([]byte(head + tc.status))
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, install.ErrCorrupt) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseUpdateFile = %v, want ErrCorrupt with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Status.Error != tc.want.Error || f.Status.ErrorClass != tc.want.ErrorClass || f.Status.ErrorCause != tc.want.ErrorCause || f.Status.ActiveVersion != tc.want.ActiveVersion {
				t.Errorf("status %+v, want %+v", f.Status, tc.want)
			}
		})
	}
}

// TestStatusSetError: the class and cause are set and cleared with the
// error.
func TestStatusSetError(t *testing.T) {
	t.Parallel()
	var st install.Status
	st.SetError("install 2.0.0: fetch: x", fmt.Errorf("x: %w", install.ErrNoSpace))
	if st.ErrorClass != install.ClassInfrastructure || st.ErrorCause != "disk full" || st.Error == "" {
		t.Fatalf("after SetError: %+v", st)
	}
	st.SetError("", nil)
	if st.Error != "" || st.ErrorClass != "" || st.ErrorCause != "" {
		t.Fatalf("after clearing: %+v", st)
	}
}
