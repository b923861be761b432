package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// repeatWindow is how soon after the first stop signal a second one is
// taken for the same request sent twice rather than an operator asking
// to force the stop. Tools send one signal to a process and to its
// group in the same breath (coreutils timeout does, and so does a kill of
// a process followed by one of its group): taken as "force", it aborted a
// clean stop and left the journal marked open, which costs the backups a
// resync. No operator presses Ctrl-C twice within a second by chance.
var repeatWindow = time.Second

// forceSignal waits for a stop signal that asks for force: the first one
// on sig at least repeatWindow after first (when a signal began the stop;
// zero when something else did). Earlier ones are logged and dropped. nil
// if sig closes.
func forceSignal(sig <-chan os.Signal, first time.Time, log *slog.Logger) os.Signal {
	for s := range sig {
		if time.Since(first) >= repeatWindow {
			return s
		}
		log.Info("stop signal repeated within a second of the first; still stopping cleanly (send it again later to force)", "signal", s.String())
	}
	return nil
}

// surviveBrokenPipe keeps a long-running process (a mount, a backup, a
// node) alive when whatever reads its output goes away: by default Go
// dies of SIGPIPE on a write to a closed stdout or stderr, and a mount
// that did left its volume a dead mount ("transport endpoint is not
// connected") under the service. Its log lines are lost instead.
func surviveBrokenPipe() { signal.Ignore(syscall.SIGPIPE) }
