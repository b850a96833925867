package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// KeyReleases is the fleet_stats key of the release catalog: what the
// leader controller last read from the release repository (--release-repo).
// It is a convenience for fleetctl and the dashboard, never a grant: agents
// verify every install through the repository themselves, so a controller
// that lies here can only hide or invent versions in listings and in
// plan set's check (which --force overrides).
const KeyReleases = "releases"

// MaxReleaseCatalogBytes bounds the catalog (about 10,000 releases).
const MaxReleaseCatalogBytes = 4 << 20

// ReleaseCatalog is the value under KeyReleases.
type ReleaseCatalog struct {
	V int `json:"v"`
	// URL is the repository read.
	URL string `json:"url"`
	// By is the controller that read it.
	By string `json:"by"`
	// Checked is when it last tried; Error is that try's error ("" when it
	// succeeded).
	Checked time.Time `json:"checked"`
	Error   string    `json:"error,omitempty"`
	// At is when it last read the repository successfully; Releases and
	// the versions are from then.
	At             time.Time         `json:"at,omitzero"`
	RootVersion    int64             `json:"root_version,omitempty"`
	TargetsVersion int64             `json:"targets_version,omitempty"`
	Expires        time.Time         `json:"expires,omitzero"`
	Releases       []rollout.Release `json:"releases"`
	// Skipped counts targets that name no release (bad path or custom
	// metadata); SkippedExample is one of their errors.
	Skipped        int    `json:"skipped,omitempty"`
	SkippedExample string `json:"skipped_example,omitempty"`
}

// Of returns the catalog's releases of app, oldest first.
func (c ReleaseCatalog) Of(app string) []rollout.Release {
	var out []rollout.Release
	for _, r := range c.Releases {
		if r.App == app {
			out = append(out, r)
		}
	}
	return out
}

// WriteReleaseCatalog writes c under KeyReleases with a "never" TTL.
func WriteReleaseCatalog(ctx context.Context, js jetstream.JetStream, c ReleaseCatalog) error {
	c.V = rollout.SchemaVersion
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if len(data) > MaxReleaseCatalogBytes {
		return fmt.Errorf("release catalog: %d bytes, more than %d", len(data), MaxReleaseCatalogBytes)
	}
	msg := nats.NewMsg(KeySubject(BucketStats, KeyReleases))
	msg.Data = data
	msg.Header.Set(jetstream.MsgTTLHeader, "never")
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("write %s/%s: %w", BucketStats, KeyReleases, err)
	}
	return nil
}

// ReadReleaseCatalog reads the catalog. Never written (no release
// repository configured) is ErrNotFound; a value that is not a catalog is
// ErrCorrupt.
func ReadReleaseCatalog(ctx context.Context, nc *nats.Conn) (ReleaseCatalog, error) {
	where := BucketStats + "/" + KeyReleases
	m, err := DirectGetLast(ctx, nc, StreamOf(BucketStats), KeySubject(BucketStats, KeyReleases))
	if err != nil {
		return ReleaseCatalog{}, err
	}
	if m.Deleted {
		return ReleaseCatalog{}, fmt.Errorf("%s: %w", where, ErrNotFound)
	}
	if m.Foreign {
		return ReleaseCatalog{}, fmt.Errorf("%s: %w", where, ErrForeign)
	}
	if len(m.Data) > MaxReleaseCatalogBytes {
		return ReleaseCatalog{}, corrupt("%s: %d bytes, more than %d", where, len(m.Data), MaxReleaseCatalogBytes)
	}
	if err := checkSchema(m.Data); err != nil {
		return ReleaseCatalog{}, fmt.Errorf("%s: %w", where, err)
	}
	var c ReleaseCatalog
	if err := json.Unmarshal(m.Data, &c); err != nil || c.Checked.IsZero() {
		return ReleaseCatalog{}, corrupt("%s: not a release catalog: %.200s", where, m.Data)
	}
	for _, r := range c.Releases {
		if rollout.ValidateAppName(r.App) != nil || rollout.ValidateVersion(r.Version) != nil {
			return ReleaseCatalog{}, corrupt("%s: a release names app %q version %q", where, r.App, r.Version)
		}
	}
	return c, nil
}
