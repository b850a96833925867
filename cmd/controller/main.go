// Command controller follows agent heartbeats and drives fleetwave rollouts.
package main

import (
	"os"
	// Time zones for start windows on hosts without a zoneinfo database
	// (containers, minimal images).
	_ "time/tzdata"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/controller"
)

func main() { os.Exit(cliutil.Main(controller.NewCommand())) }
