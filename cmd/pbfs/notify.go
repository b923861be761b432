package main

import (
	"log/slog"

	"github.com/pbfs/pbfs/internal/sdnotify"
)

// notifySystemd tells systemd the state of a unit of Type=notify (the
// samples in etc/systemd): READY=1 once the volume is mounted or the
// backup listens, so a service ordered after pbfs never starts on the
// bare directory; STOPPING=1 when a stop begins. A failure is logged, not
// fatal: pbfs serves either way.
func notifySystemd(state string, log *slog.Logger) {
	if sent, err := sdnotify.Notify(state); err != nil {
		log.Warn("could not tell systemd the state", "state", state, "err", err)
	} else if sent {
		log.Debug("told systemd", "state", state)
	}
}
