package auth

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// File is one file of an auth directory, by path relative to it (or an
// absolute path elsewhere, such as an agent's creds written straight to
// where they are shipped from).
type File struct {
	Name string
	Data []byte
	// Secret files (seeds, creds) are written 0600 in a 0700 directory;
	// the rest (JWTs, config includes, records) 0644.
	Secret bool
}

// WriteFiles writes files under dir, each atomically (a crash leaves the old
// or the new file, never half of one). It is the only place this package
// writes to disk, so the permissions of secrets are decided once.
func WriteFiles(dir string, files ...File) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		path := f.Name
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, f.Name)
		}
		if filepath.Dir(path) != filepath.Clean(dir) {
			perm := os.FileMode(0o755)
			if f.Secret {
				perm = 0o700
			}
			if err := os.MkdirAll(filepath.Dir(path), perm); err != nil {
				return err
			}
		}
		perm := os.FileMode(0o644)
		if f.Secret {
			perm = 0o600
		}
		if err := renameio.WriteFile(path, f.Data, perm); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		// renameio applies the umask; a secret must never be wider than
		// 0600 and a public file should be readable by the server.
		if err := os.Chmod(path, perm); err != nil {
			return err
		}
	}
	return nil
}
