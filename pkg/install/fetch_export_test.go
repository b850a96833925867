package install

import (
	"io"
	"time"
)

// NewProgress exposes the download progress writer to the external tests,
// with its clock.
func NewProgress(w io.Writer, name string, start, total int64, now func() time.Time) (write func([]byte), done func()) {
	p := newProgress(w, name, start, total, now)
	return func(b []byte) { _, _ = p.Write(b) }, p.done
}
