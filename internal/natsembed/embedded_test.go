package natsembed_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natsembed"
)

// TestStartFailsAtOnce: what stops nats-server's start reached only its
// logger, which the embedded server discarded, so Start waited 10 s and then
// guessed "(port in use?)". Each case fails at once with the real cause,
// with and without Debug (whose stderr logger would have exited the process
// on nats-server's Fatalf).
func TestStartFailsAtOnce(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	aFile := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(aFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A store whose jetstream directory is a file: only nats-server
	// itself finds out, while it starts.
	badJS := t.TempDir()
	if err := os.WriteFile(filepath.Join(badJS, "jetstream"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		o    natsembed.Options
		want string
	}{
		"port in use":             {natsembed.Options{Listen: busy.Addr().String(), StoreDir: t.TempDir()}, "address already in use"},
		"store under a file":      {natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(aFile, "nats")}, "not a directory"},
		"jetstream dir is a file": {natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: badJS}, "not a directory"},
	}
	for name, tc := range cases {
		for _, debug := range []bool{false, true} {
			o := tc.o
			o.Debug = debug
			t0 := time.Now()
			ns, err := natsembed.Start(o)
			took := time.Since(t0)
			if err == nil {
				ns.Shutdown()
				t.Errorf("%s (debug %v): started, want an error", name, debug)
				continue
			}
			t.Logf("%s (debug %v): %v", name, debug, err)
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "port in use?") {
				t.Errorf("%s (debug %v): %v, want the cause %q", name, debug, err, tc.want)
			}
			if took > 3*time.Second {
				t.Errorf("%s (debug %v): failed after %v, want at once", name, debug, took)
			}
		}
	}
}
