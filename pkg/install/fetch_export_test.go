package install

import (
	"io"
	"log/slog"
	"time"
)

// NewProgress exposes the download progress writer to the external tests,
// with its clock.
func NewProgress(w io.Writer, name string, start, total int64, now func() time.Time) (write func([]byte), done func()) {
	p := newProgress(w, name, start, total, now)
	return func(b []byte) { _, _ = p.Write(b) }, p.done
}

// NewLogProgress exposes Fetcher.Log's and Fetcher.OnProgress's record of
// a download to the external tests, with its clock.
func NewLogProgress(log *slog.Logger, record func(DownloadProgress), url string, start, total int64, every time.Duration, lines bool,
	now func() time.Time) (write func([]byte), done func()) {
	p := newLogProgress(log, record, url, start, total, every, lines, now)
	return func(b []byte) { _, _ = p.Write(b) }, p.done
}
