// Command controller follows agent heartbeats and drives fleetwave rollouts.
package main

import (
	"os"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/controller"
)

func main() { os.Exit(cliutil.Main(controller.NewCommand())) }
