package controller_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/natstest"
)

// TestReconnectRescansAtOnce (issue 25 point 14): heartbeats republished
// while the controller's connection is down are lost to its subscription.
// The controller used to read the stream again only at its next stats tick
// (10 s by default), so an agent heartbeating more often than a third of
// that could be shown unreachable although its heartbeats were stored. Now
// the first batch after a reconnect makes it read the inventory again at
// once: no clock step is needed for the rescan.
func TestReconnectRescansAtOnce(t *testing.T) {
	f := newFixture(t)
	f.blueConfig(nil)
	logs := &natstest.Buffer{}
	rc := f.startControllerLogging("c1", logs)
	agents := tenAgents()
	f.publishHeartbeats(rc, agents)
	const rescanned = "reading the inventory again"
	if strings.Contains(logs.String(), rescanned) {
		t.Fatal("rescanned before any reconnect")
	}
	nc := f.fleet.JS.Conn()
	before := nc.Stats().Reconnects
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, waitLong, func() error {
		if nc.Stats().Reconnects == before || !nc.IsConnected() {
			return fmt.Errorf("not reconnected yet")
		}
		return nil
	})
	// The clock does not move: only a heartbeat arrives.
	natstest.Eventually(t, waitLong, func() error {
		f.publishHeartbeats(rc, agents[:1])
		if !strings.Contains(logs.String(), rescanned) {
			return fmt.Errorf("no rescan after the reconnect without a stats tick")
		}
		return nil
	})
}
