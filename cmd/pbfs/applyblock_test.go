package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
)

// TestBackupCannotApplyLargeXattr: a primary on tmpfs takes an extended
// attribute of 64 KiB, which its backup's ext4 refuses with ENOSPC
// however much room it has. The backup keeps the batch and retries it,
// and says so: its status names the state, the batch, the op, the path
// and the errno, and that more room is unlikely to help; the primary's status
// shows it for that backup; both count it in a metric. A promotion of
// that backup, the primary gone, refuses with the reason instead of
// waiting for the apply for good.
func TestBackupCannotApplyLargeXattr(t *testing.T) {
	c, _ := backupOnSmallFS(t)
	b := c.Backups[0]
	metrics := fstest.FreeAddr(t)
	b.Args = []string{"--metrics-listen", metrics}
	restart(c, b)
	c.Primary.Stop()
	fstest.MountTmpfs(t, c.Vol, 64<<20)
	c.Primary = startMount(t, nil, c.Vol, c.Jdir, "--backup", b.Addr, "--ack", "all")
	c.RequireConverged()

	p := filepath.Join(c.Vol, "f")
	must(t, os.WriteFile(p, []byte("f"), 0o644))
	must(t, unix.Setxattr(p, "user.big", bytes.Repeat([]byte{'x'}, 64<<10), 0))
	must(t, os.WriteFile(filepath.Join(c.Vol, "after"), []byte("acknowledged"), 0o644))
	seq := c.Barrier() // durable on the backup, though it cannot apply it

	var state string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, code := run(t, "status", "--journal", b.Jdir)
		if code == 0 && strings.Contains(out, "cannot apply batch") {
			state = out
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backup's status does not say it cannot apply:\n%s\nbackup:\n%s", out, b.Out)
		}
	}
	for _, want := range []string{"ENOSPC", `"f"`, "user.big", "more room is unlikely to help"} {
		if !strings.Contains(state, want) {
			t.Errorf("the backup's status lacks %q:\n%s", want, state)
		}
	}
	if out, _ := run(t, "status", "--journal", c.Jdir); !strings.Contains(out, "cannot apply batch") || !strings.Contains(out, "ENOSPC") {
		t.Errorf("the primary's status does not show the backup cannot apply:\n%s", out)
	}
	if n := c.Primary.Counter("pbfs_replicate_backup_apply_blocked", b.Addr); n != 1 {
		t.Errorf("pbfs_replicate_backup_apply_blocked = %v on the primary, want 1", n)
	}
	if n := fstest.ScrapeSum(t, "http://"+metrics+"/metrics", "pbfs_backup_apply_blocked", ""); n != 1 {
		t.Errorf("pbfs_backup_apply_blocked = %v on the backup, want 1", n)
	}

	c.Primary.Kill()
	syscall.Unmount(c.Vol, syscall.MNT_DETACH)
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	out, code := run(t, "promote", "--journal", b.Jdir, "--token", fstest.TestToken, b.Vol)
	if code != 1 || !strings.Contains(out, "cannot be promoted safely") || !strings.Contains(out, "cannot apply batch") ||
		!strings.Contains(out, "ENOSPC") {
		t.Fatalf("promote of a backup that cannot apply batch %d: exit %d, want 1 naming why:\n%s", seq, code, out)
	}
	if fstest.Mounted(b.Vol) {
		t.Fatal("the refused promotion mounted the volume")
	}
}
