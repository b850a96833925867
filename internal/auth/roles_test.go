package auth_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestRoleGrants: who may change the target version. The controller writes
// group statuses, stats and events but neither the plan spec nor the config;
// the admin writes both; a leaf user cannot be used as a client at all.
func TestRoleGrants(t *testing.T) {
	e := newFleetEnv(t)
	if _, _, err := e.dir.IssueUser("edge-x", auth.RoleLeaf, ""); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		creds  string
		bucket string
		key    string
		denied string // subject of the expected violation; "" = allowed
	}{
		{"controller writes a group status", auth.CredsFile(auth.UserController), kv.BucketPlan, kv.GroupKey("blue"), ""},
		{"controller writes stats", auth.CredsFile(auth.UserController), kv.BucketStats, kv.StatsKey("blue", "c1"), ""},
		{"controller may not change the target", auth.CredsFile(auth.UserController), kv.BucketPlan, kv.KeySpec, "$KV.fleet_plan.spec"},
		{"controller may not change the config", auth.CredsFile(auth.UserController), kv.BucketConfig, kv.KeyConfig, "$KV.fleet_config.config"},
		{"admin changes the target", auth.CredsFile(auth.UserAdmin), kv.BucketPlan, kv.KeySpec, ""},
		{"admin changes the config", auth.CredsFile(auth.UserAdmin), kv.BucketConfig, kv.KeyConfig, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := e.watched(c.creds)
			ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
			defer cancel()
			b, err := a.js.KeyValue(ctx, c.bucket)
			if err != nil {
				t.Fatal(err)
			}
			callCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := b.Put(callCtx, c.key, []byte(`{"v":1}`))
				done <- err
			}()
			if c.denied == "" {
				if err := <-done; err != nil {
					t.Errorf("put: %v (server said %q)", err, a.violations())
				}
				stop()
				return
			}
			if err := a.violation(ctx, c.denied); err != nil {
				t.Error(err)
			}
			stop()
			if err := <-done; err == nil {
				t.Error("denied put reported success")
			}
		})
	}
	t.Run("leaf user cannot connect as a client", func(t *testing.T) {
		nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: e.srv.URL(), Name: "test",
			Creds: filepath.Join(e.dir.Path, auth.CredsFile("edge-x")), Log: natstest.Logger(t)})
		if err == nil {
			nc.Close()
			t.Fatal("connected")
		}
		if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			t.Errorf("got %v, want an authorization violation", err)
		}
	})
}
