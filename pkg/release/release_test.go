package release_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/release"
)

func TestPublishRefreshAndFindTarget(t *testing.T) {
	r := tuftest.New(t, nil)
	content := []byte("release 1.2.0 bytes")
	p := r.Add(release.Custom{App: "web", Version: "1.2.0", OS: "linux", Arch: "amd64", Security: true}, "app.tar.gz", content)
	if p != "web/1.2.0/linux-amd64/app.tar.gz" {
		t.Fatalf("path %q", p)
	}
	c := r.Client(nil)
	tr, err := c.Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tg, err := tr.Target("web", "1.2.0", "linux", "amd64")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	if tg.Length != int64(len(content)) || tg.SHA256 != hex.EncodeToString(sum[:]) || !tg.Custom.Security {
		t.Fatalf("target %+v", tg)
	}
	resp, err := http.Get(tg.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != string(content) {
		t.Fatalf("GET %s: %q", tg.URL, got)
	}
	if _, err := tr.Target("web", "1.2.0", "linux", "arm64"); !errors.Is(err, release.ErrNoTarget) {
		t.Fatalf("arm64: %v", err)
	}
	if _, err := tr.Target("db", "1.2.0", "linux", "amd64"); !errors.Is(err, release.ErrNoTarget) {
		t.Fatalf("other app: %v", err)
	}
	rs, bad := tr.Releases()
	if len(rs) != 1 || len(bad) != 0 || rs[0].Version != "1.2.0" || !rs[0].Security {
		t.Fatalf("releases %+v bad %v", rs, bad)
	}
}
