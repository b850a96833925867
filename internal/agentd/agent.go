package agentd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/internal/version"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Options configure an agent.
type Options struct {
	Root     string
	Group    string // overrides (and is saved into) update.yaml's spec.group
	NATSURL  string // overrides update.yaml's spec.nats
	Creds    string
	Hostname string
	// Interval and Jitter of heartbeats.
	Interval time.Duration
	Jitter   time.Duration
	Clock    clock.Clock
	Log      *slog.Logger
}

// Defaults.
const (
	DefaultRoot     = "/var/lib/fleetwave"
	DefaultInterval = 30 * time.Second
	DefaultJitter   = 3 * time.Second
)

// Agent is one host's agent.
type Agent struct {
	o   Options
	id  rollout.AgentID
	pub *heartbeat.Publisher

	mu     sync.Mutex
	update *install.UpdateFile
}

// New loads (or creates) the agent's identity and update.yaml under o.Root.
func New(o Options) (*Agent, error) {
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Hostname == "" {
		o.Hostname, _ = os.Hostname()
	}
	if o.Group != "" {
		if err := rollout.ValidateGroupName(o.Group); err != nil {
			return nil, fmt.Errorf("--group: %w", err)
		}
	}
	id, err := install.LoadOrCreateAgentID(o.Root)
	if err != nil {
		return nil, err
	}
	uf, err := install.LoadOrCreateUpdateFile(o.Root, o.Group)
	if err != nil {
		return nil, err
	}
	if o.Group != "" && uf.Spec.Group != o.Group {
		if uf.Spec.Group != "" {
			o.Log.Info("moving to another group", slog.String("from", uf.Spec.Group), slog.String("to", o.Group))
		}
		uf.Spec.Group = o.Group
		if err := uf.Save(o.Root); err != nil {
			return nil, err
		}
	}
	if uf.Spec.Group == "" {
		return nil, errors.New("no group: pass --group or set spec.group in update.yaml")
	}
	if o.NATSURL == "" {
		o.NATSURL = uf.Spec.NATS
	}
	return &Agent{o: o, id: id, update: uf}, nil
}

// ID is the agent's update id.
func (a *Agent) ID() rollout.AgentID { return a.id }

// Group is the agent's rollout group.
func (a *Agent) Group() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.update.Spec.Group
}

// Heartbeat is the agent's current status as a heartbeat (V, At and Seq are
// the publisher's to fill).
func (a *Agent) Heartbeat() heartbeat.Heartbeat {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.update.Status
	return heartbeat.Heartbeat{
		AgentID:        a.id,
		Hostname:       heartbeat.CleanText(a.o.Hostname, heartbeat.MaxHostnameLen),
		Group:          a.update.Spec.Group,
		ActiveVersion:  st.ActiveVersion,
		StartVersion:   st.StartVersion,
		StartTime:      st.StartTime,
		Rollback:       st.Rollback,
		RollbackFrom:   st.RollbackFrom,
		Error:          heartbeat.CleanText(st.Error, heartbeat.MaxErrorLen),
		UpdaterVersion: version.Version,
	}
}

// SetStatus records a new status in update.yaml and heartbeats it at once.
func (a *Agent) SetStatus(st install.Status) error {
	a.mu.Lock()
	a.update.Status = st
	err := a.update.Save(a.o.Root)
	a.mu.Unlock()
	if err != nil {
		return err
	}
	if a.pub != nil {
		a.pub.Kick()
	}
	return nil
}

// Run connects to the bus and heartbeats until ctx is done. The bus being
// down at start or going away later is logged and waited out, never fatal.
func (a *Agent) Run(ctx context.Context) error {
	if a.o.NATSURL == "" {
		return errors.New("no NATS server: pass --nats, set NATS_URL, or set spec.nats in update.yaml")
	}
	a.pub = &heartbeat.Publisher{
		Interval: a.o.Interval,
		Jitter:   a.o.Jitter,
		Clock:    a.o.Clock,
		Log:      a.o.Log,
		Status:   a.Heartbeat,
	}
	nc, err := natsutil.Connect(natsutil.ConnectOptions{
		URL:         a.o.NATSURL,
		Name:        "fleetwave-agentd " + string(a.id),
		Creds:       a.o.Creds,
		Log:         a.o.Log,
		NoBuffer:    true,
		RetryFirst:  true,
		OnReconnect: a.pub.Kick,
	})
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	a.pub.JS = js
	a.o.Log.Info("agent started", slog.String("agent_id", string(a.id)), slog.String("group", a.Group()),
		slog.String("active_version", a.Heartbeat().ActiveVersion))
	return a.pub.Run(ctx)
}
