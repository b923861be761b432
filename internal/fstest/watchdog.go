package fstest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Watchdog aborts the FUSE connection of the mount at dir shortly before
// the test binary's deadline. A test that serves a mount in-process and
// hangs would otherwise leave threads stuck in requests to its own dead
// server: the process cannot exit and the hang never shows its stacks.
// After an abort every call on the mount fails with ENOTCONN instead.
func Watchdog(t testing.TB, dir string) {
	deadline, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return
	}
	d, ok := deadline.Deadline()
	if !ok {
		return
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return
	}
	conn := filepath.Join("/sys/fs/fuse/connections", fmt.Sprint(unix.Minor(st.Dev)), "abort")
	timer := time.AfterFunc(time.Until(d)-20*time.Second, func() {
		if _, err := os.Stat("/sys/fs/fuse/connections"); err == nil {
			unix.Mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, "")
		}
		fmt.Fprintf(os.Stderr, "fstest: aborting the FUSE connection of %s: the test is about to time out\n", dir)
		os.WriteFile(conn, []byte("1"), 0)
	})
	t.Cleanup(func() { timer.Stop() })
}
