//go:build !linux

package install

import "os"

// syncFile fsyncs one extracted file (no syncfs here; see the Linux file).
func (x *extractor) syncFile(f *os.File) error { return f.Sync() }

// syncTree fsyncs every created directory.
func (x *extractor) syncTree() error { return x.syncDirs() }
