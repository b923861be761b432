package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

// runHelper runs a mount helper's call (helper.go) and returns its exit
// status: 0 once the volume is mounted and served by a pbfs mount left
// running in the background, 1 for a bad call, 32 when the mount fails
// (with what the daemon logged, on stderr).
func runHelper(argv []string, app *cli.App) int {
	fail := func(code int, err error) int {
		fmt.Fprintf(os.Stderr, "%s: %v\n", helperName, err)
		return code
	}
	h, err := parseHelper(argv[1:])
	if err != nil {
		return fail(helperUsage, fmt.Errorf("%w (usage: %s SRC MNT [-sfnv] [-o OPTS])", err, helperName))
	}
	args, logPath, err := h.daemonArgs(app, func(msg string) { fmt.Fprintf(os.Stderr, "%s: %s\n", helperName, msg) })
	if err != nil {
		return fail(helperUsage, err)
	}
	if logPath == "" {
		logPath = defaultLog(h.mnt)
	}
	if h.fake {
		return 0
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(helperFailed, fmt.Errorf("find the pbfs binary: %w", err))
	}
	logf, err := logWriter(logPath)
	if err != nil {
		return fail(helperFailed, err)
	}
	defer logf.Close()
	from, _ := logf.Seek(0, io.SeekEnd)
	pid, err := startDaemon(exe, args, logf)
	if err != nil {
		if tail := logSince(logPath, from); tail != "" {
			fmt.Fprint(os.Stderr, tail)
		}
		code := helperFailed
		if ee, ok := errors.AsType[*exec.ExitError](err); ok && ee.ExitCode() == 2 {
			code = helperUsage // pbfs mount's own usage error
		}
		return fail(code, fmt.Errorf("mount %s at %s failed (log: %s): %w", h.src, h.mnt, logPath, err))
	}
	if h.verbose {
		fmt.Printf("%s: pbfs serves %s at %s (pid %d, log %s)\n", helperName, h.src, h.mnt, pid, logPath)
	}
	return 0
}

// startDaemon starts pbfs with args in a session of its own, its output
// to logf, and waits until it says the volume is served (tellHelper) or
// exits.
func startDaemon(exe string, args []string, logf *os.File) (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{w} // descriptor 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = daemonEnv(os.Environ())
	err = cmd.Start()
	w.Close()
	if err != nil {
		return 0, err
	}
	line, _ := bufio.NewReader(r).ReadString('\n')
	if strings.TrimSpace(line) == "ready" {
		pid := cmd.Process.Pid
		cmd.Process.Release()
		return pid, nil
	}
	if err := cmd.Wait(); err != nil {
		return 0, err
	}
	return 0, errors.New("pbfs exited before the volume was mounted")
}

// stdPath is the PATH the daemon gets when mount(8), which clears it,
// ran the helper: pbfs mounts through fusermount3 and runs plugins.
const stdPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// daemonEnv is the daemon's environment: the helper's, with a PATH, the
// pipe it reports on (descriptor 3), and no NOTIFY_SOCKET: the daemon is
// not the service systemd waits for, and tells this helper it is ready.
func daemonEnv(env []string) []string {
	out := []string{readyEnv + "=3"}
	path := false
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "NOTIFY_SOCKET="), strings.HasPrefix(kv, readyEnv+"="):
		case strings.HasPrefix(kv, "PATH="):
			path = kv != "PATH="
			if path {
				out = append(out, kv)
			}
		default:
			out = append(out, kv)
		}
	}
	if !path {
		out = append(out, stdPath)
	}
	return out
}

// logSince returns what the log at path holds past offset from.
func logSince(path string, from int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, from, 1<<20))
	return string(b)
}
