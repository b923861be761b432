package main

import (
	"log/slog"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

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

// readyEnv names the descriptor of the pipe the mount helper (helper.go)
// waits on for "ready", in the environment of the pbfs it starts.
const readyEnv = "PBFS_READY_FD"

// helperPipe takes the mount helper's pipe, if pbfs runs under it, as the
// command starts: marked close-on-exec and out of the environment, so no
// plugin inherits it and keeps the helper waiting.
func helperPipe() *os.File {
	v := os.Getenv(readyEnv)
	if v == "" {
		return nil
	}
	os.Unsetenv(readyEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "mount helper")
}

// tellHelper tells the mount helper that the volume is mounted and served,
// so mount(8) returns.
func tellHelper(p *os.File, log *slog.Logger) {
	if p == nil {
		return
	}
	if _, err := p.WriteString("ready\n"); err != nil {
		log.Warn("could not tell the mount helper the volume is mounted", "err", err)
	}
	p.Close()
}
