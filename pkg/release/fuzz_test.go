package release_test

import (
	"encoding/json"
	"path"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// FuzzParseTargetPath: whatever a repository names a target, parsing
// never panics, and a path it accepts is exactly the path TargetPath
// makes from what it parsed, with fields that pass their validation and
// a file name that cannot leave its directory. Seeds:
// testdata/fuzz/FuzzParseTargetPath.
func FuzzParseTargetPath(f *testing.F) {
	for _, s := range []string{"web/1.2.0/linux-amd64/app.tar.gz", "web/1.2.0-rc.1/linux-arm64/web_1.2.0.tar.gz", "../1.0.0/linux-amd64/x", "web/1.0.0/linux-amd64/..", "web/1.0.0/linux/app", "web/1.0.0/linux-amd64/a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, err := release.ParseTargetPath(p)
		if err != nil {
			return
		}
		file := p[strings.LastIndex(p, "/")+1:]
		again, err := release.TargetPath(c.App, c.Version, c.OS, c.Arch, file)
		if err != nil || again != p {
			t.Fatalf("%q parsed as %+v, made again as %q (%v)", p, c, again, err)
		}
		if rollout.ValidateAppName(c.App) != nil || rollout.ValidateVersion(c.Version) != nil || c.Security || c.EndOfLife || c.Notes != "" {
			t.Fatalf("%q parsed as %+v", p, c)
		}
		if file == "." || file == ".." || path.Clean(file) != file || strings.ContainsAny(file, "/\\\x00") || strings.Contains(c.OS, "-") {
			t.Fatalf("%q: file %q, os %q", p, file, c.OS)
		}
	})
}

// FuzzDecodeCustom: custom metadata that DecodeCustom accepts names what
// its path names, and encodes and decodes again to itself. Seeds:
// testdata/fuzz/FuzzDecodeCustom.
func FuzzDecodeCustom(f *testing.F) {
	f.Add("web/1.2.0/linux-amd64/app.tar.gz", `{"app":"web","version":"1.2.0","os":"linux","arch":"amd64","security":true}`)
	f.Add("web/1.2.0/linux-amd64/app.tar.gz", `{"app":"db","version":"1.2.0","os":"linux","arch":"amd64"}`)
	f.Add("web/1.2.0/linux-amd64/app.tar.gz", `{"app":"web","version":"1.2.0","os":"linux","arch":"amd64","notes":"\u001b[31m","end_of_life":true}`)
	f.Add("web/1.2.0/linux-amd64/app.tar.gz", `null`)
	f.Add("web/1.2.0/linux-amd64/app.tar.gz", `{"app":"web","app":"db","version":"1.2.0","os":"linux","arch":"amd64"}`)
	f.Fuzz(func(t *testing.T, p, raw string) {
		rm := json.RawMessage(raw)
		c, err := release.DecodeCustom(p, &rm)
		if err != nil {
			return
		}
		want, err := release.ParseTargetPath(p)
		if err != nil {
			t.Fatalf("DecodeCustom accepted %q, ParseTargetPath refuses it: %v", p, err)
		}
		if c.App != want.App || c.Version != want.Version || c.OS != want.OS || c.Arch != want.Arch {
			t.Fatalf("%q: custom %+v", p, c)
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		rm = b
		again, err := release.DecodeCustom(p, &rm)
		if err != nil || again != c {
			t.Fatalf("%+v encoded and decoded: %+v %v", c, again, err)
		}
	})
}
