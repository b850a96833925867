// Command fleetctl is the fleetwave operator CLI.
package main

import (
	"os"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
)

func main() { os.Exit(cliutil.Main(fleetctl.NewCommand())) }
