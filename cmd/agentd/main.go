// Command agentd is the fleetwave agent that runs on every host.
package main

import (
	"os"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/cliutil"
)

func main() { os.Exit(cliutil.Main(agentd.NewCommand())) }
