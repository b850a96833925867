// Command fleetctl is the fleetwave operator CLI.
package main

import (
	"os"
	// Time zones for start windows on hosts without a zoneinfo database
	// (containers, minimal images).
	_ "time/tzdata"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
)

func main() { os.Exit(cliutil.Main(fleetctl.NewCommand())) }
