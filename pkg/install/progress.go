package install

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

const (
	// progressInterval is how often a terminal's progress line is redrawn.
	progressInterval = 500 * time.Millisecond
	// DefaultProgressEvery is Fetcher.ProgressEvery's default: how often
	// a daemon's log and 'agentd status' hear of a moving download.
	DefaultProgressEvery = 5 * time.Second
)

// DownloadProgress is how far a release download has got: the figures a
// terminal's progress line, the "downloading" log lines and 'agentd status'
// show.
type DownloadProgress struct {
	// Received is the tarball's bytes on disk (an earlier attempt's
	// included), Bytes its size.
	Received int64 `json:"received"`
	Bytes    int64 `json:"bytes"`
	// BytesPerSecond is this transfer's average rate (what an earlier
	// attempt left is not counted); 0 until it can be measured.
	BytesPerSecond int64 `json:"bytes_per_second"`
	// ETASeconds is the time left at that rate; 0 when complete or not yet
	// known.
	ETASeconds int64 `json:"eta_seconds"`
	// At is when these figures were taken.
	At time.Time `json:"at"`
}

// meter measures one transfer of a tarball.
type meter struct {
	start int64 // bytes already on disk when this transfer began
	n     int64 // bytes on disk so far, start included
	total int64
	began time.Time
}

// at is the transfer's figures at t.
func (m *meter) at(t time.Time) DownloadProgress {
	p := DownloadProgress{Received: m.n, Bytes: m.total, At: t.UTC().Round(0)}
	if el := t.Sub(m.began); el > 0 {
		p.BytesPerSecond = int64(float64(m.n-m.start) / el.Seconds())
	}
	if left := m.total - m.n; left > 0 && p.BytesPerSecond > 0 {
		p.ETASeconds = (left + p.BytesPerSecond - 1) / p.BytesPerSecond
	}
	return p
}

// progress writes "\r<name>: 12.0 MiB/45.6 MiB (26%) 3.2 MiB/s ETA 11s" at
// most every progressInterval, and a final line (no ETA) with a newline
// from done.
type progress struct {
	w          io.Writer
	name       string
	m          meter
	now        func() time.Time
	lastReport time.Time
	width      int // of the last line drawn: a shorter one blanks the rest
}

func newProgress(w io.Writer, name string, start, total int64, now func() time.Time) *progress {
	t := now()
	return &progress{w: w, name: name, m: meter{start: start, n: start, total: total, began: t}, now: now, lastReport: t}
}

func (p *progress) Write(b []byte) (int, error) {
	p.m.n += int64(len(b))
	if t := p.now(); t.Sub(p.lastReport) >= progressInterval {
		p.lastReport = t
		p.report(t, "")
	}
	// A terminal that cannot be written to must not fail the download.
	return len(b), nil
}

func (p *progress) done() { p.report(p.now(), "\n") }

func (p *progress) report(t time.Time, end string) {
	fig := p.m.at(t)
	pct := 100.0
	if fig.Bytes > 0 {
		pct = 100 * float64(fig.Received) / float64(fig.Bytes)
	}
	line := fmt.Sprintf("%s: %s/%s (%.0f%%) %s/s", p.name, mib(float64(fig.Received)), mib(float64(fig.Bytes)), pct, mib(float64(fig.BytesPerSecond)))
	if end == "" && fig.ETASeconds > 0 {
		line += " ETA " + (time.Duration(fig.ETASeconds) * time.Second).String()
	}
	pad := max(p.width-len(line), 0)
	p.width = len(line)
	fmt.Fprintf(p.w, "\r%s%s%s", line, strings.Repeat(" ", pad), end)
}

// progressName is the tarball's file name, without a query that may hold
// a token.
func progressName(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return path.Base(u.Path)
	}
	return "download"
}

func mib(n float64) string { return strconv.FormatFloat(n/(1<<20), 'f', 1, 64) + " MiB" }

// logProgress is a download's record for a daemon: Fetcher.Log's
// "downloading" line at the start, one every `every` with the figures
// (unless a terminal's progress line shows them: lines false) and a
// "downloaded" line at the end; and the figures handed to record at the
// start, every `every` and at the end.
type logProgress struct {
	log    *slog.Logger // nil: no lines
	lines  bool
	record func(DownloadProgress) // nil: none
	every  time.Duration
	m      meter
	now    func() time.Time
	last   time.Time
}

func newLogProgress(log *slog.Logger, record func(DownloadProgress), rawURL string, start, total int64, every time.Duration, lines bool,
	now func() time.Time) *logProgress {
	t := now()
	if log != nil {
		attrs := []any{slog.String("url", rawURL), slog.Int64("bytes", total)}
		if start > 0 {
			attrs = append(attrs, slog.Int64("resumed_at", start))
		}
		log.Info("downloading", attrs...)
	}
	p := &logProgress{log: log, lines: lines, record: record, every: every, m: meter{start: start, n: start, total: total, began: t}, now: now, last: t}
	if record != nil {
		record(p.m.at(t))
	}
	return p
}

func (p *logProgress) Write(b []byte) (int, error) {
	p.m.n += int64(len(b))
	t := p.now()
	if t.Sub(p.last) < p.every {
		return len(b), nil
	}
	p.last = t
	fig := p.m.at(t)
	if p.log != nil && p.lines {
		attrs := []any{slog.Int64("received", fig.Received), slog.Int64("bytes", fig.Bytes),
			slog.Int64("percent", 100*fig.Received/max(fig.Bytes, 1)), slog.String("rate", mib(float64(fig.BytesPerSecond))+"/s")}
		if fig.ETASeconds > 0 {
			attrs = append(attrs, slog.Duration("eta", time.Duration(fig.ETASeconds)*time.Second))
		}
		p.log.Info("downloading", attrs...)
	}
	if p.record != nil {
		p.record(fig)
	}
	return len(b), nil
}

// done reports the complete transfer.
func (p *logProgress) done() {
	t := p.now()
	fig := p.m.at(t)
	if p.log != nil {
		p.log.Info("downloaded", slog.Int64("bytes", fig.Bytes), slog.Duration("took", t.Sub(p.m.began).Round(time.Millisecond)),
			slog.String("rate", mib(float64(fig.BytesPerSecond))+"/s"))
	}
	if p.record != nil {
		p.record(fig)
	}
}
