package host

import "github.com/pbfs/pbfs/internal/status"

// The shapes the supervisor reports moved to package status; these names
// stay until their users name that package's.

type (
	Status = status.Plugin
	State  = status.PluginState
)

const (
	StateStarting   = status.PluginStarting
	StateRunning    = status.PluginRunning
	StateRestarting = status.PluginRestarting
	StateStopped    = status.PluginStopped
)
