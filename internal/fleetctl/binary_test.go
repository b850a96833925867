package fleetctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fleetctlBin builds cmd/fleetctl into a temporary directory and returns
// the binary's path: the tests below run it as an operator would.
func fleetctlBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fleetctl")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fleetwave/fleetwave/cmd/fleetctl").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cmd/fleetctl: %v\n%s", err, out)
	}
	return bin
}

// runBin runs the binary with args and a clean environment (no NATS_*
// from the developer's shell) and returns stdout, stderr and exit code.
func runBin(t *testing.T, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// oneObject decodes out as exactly one JSON object into v.
func oneObject(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value:\n%s", out)
	}
}

// sameJSON fails unless got and want encode to the same JSON.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var gv, wv any
	_ = json.Unmarshal(g, &gv)
	_ = json.Unmarshal(w, &wv)
	if diff := cmp.Diff(wv, gv); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}
