package controller

import "github.com/fleetwave/fleetwave/pkg/heartbeat"

// AppInventory is a stand-in until the engine's per-app inventories land
// (branch h26/engine, "ENGINE-READY"): every app reads the one inventory.
// Deleted when h26/engine is merged.
func (c *Controller) AppInventory(app string) *heartbeat.Aggregator { return c.agg }
