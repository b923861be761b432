package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
)

// TestBackupRefusesJournalInsideVolume: `pbfs backup` refuses a journal
// inside its volume, however it is reached, before creating anything:
// the first resync would remove it (it did, and the backup went on
// acking). A usage error, exit 2.
func TestBackupRefusesJournalInsideVolume(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	must(t, os.MkdirAll(filepath.Join(vol, "inner"), 0o755))
	must(t, os.Symlink(filepath.Join(vol, "inner"), filepath.Join(dir, "link")))
	must(t, os.Mkdir(filepath.Join(dir, "bound"), 0o755))
	bound := false
	if err := unix.Mount(filepath.Join(vol, "inner"), filepath.Join(dir, "bound"), "", unix.MS_BIND, ""); err == nil {
		bound = true
		t.Cleanup(func() { unix.Unmount(filepath.Join(dir, "bound"), unix.MNT_DETACH) })
	}
	cases := map[string]string{
		"inside":                          filepath.Join(vol, "j"),
		"through a symlink":               filepath.Join(dir, "link", "j"),
		"the volume's own directory":      vol,
		"a bind mount of a dir inside it": filepath.Join(dir, "bound", "j"),
	}
	if !bound {
		delete(cases, "a bind mount of a dir inside it")
	}
	for what, j := range cases {
		out, code := run(t, "backup", "--listen", fstest.FreeAddr(t), "--journal", j, "--token", fstest.TestToken, vol)
		if code != 2 || !strings.Contains(out, "inside the volume") {
			t.Errorf("%s: exit %d, want 2 naming the journal inside the volume:\n%s", what, code, out)
		}
	}
	if _, err := os.Stat(filepath.Join(vol, "j")); !os.IsNotExist(err) {
		t.Errorf("the refused backup created its journal inside the volume: %v", err)
	}
}

// TestResyncOfSpecialFilesAndHoles: a backup that starts empty is
// resynced from a volume of FIFOs, device nodes (a whiteout among them),
// sockets, extended attributes on every type, and sparse files, one of
// them 1 TiB. The resync must not open any special file (a FIFO blocked the
// backup in open for good), must keep holes holes (a sparse volume took
// four times its size on the backup), must not list the holes block by
// block (the 1 TiB file took 31 s and 1.5 GB of the backup's memory), and
// must end equal.
func TestResyncOfSpecialFilesAndHoles(t *testing.T) {
	const sparseSize, dataAt = 256 << 20, 100 << 20
	seed := func(vol string) {
		must(t, unix.Mkfifo(filepath.Join(vol, "fifo"), 0o640))
		must(t, unix.Mknod(filepath.Join(vol, "whiteout"), unix.S_IFCHR, 0))
		must(t, unix.Mknod(filepath.Join(vol, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		must(t, unix.Mknod(filepath.Join(vol, "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 200))))
		must(t, unix.Mknod(filepath.Join(vol, "sock"), unix.S_IFSOCK|0o700, 0))
		must(t, os.Symlink("fifo", filepath.Join(vol, "link")))
		for _, p := range []string{"fifo", "null", "link", "whiteout"} {
			must(t, unix.Lsetxattr(filepath.Join(vol, p), "trusted.label", []byte("on "+p), 0))
		}
		f, err := os.Create(filepath.Join(vol, "sparse"))
		must(t, err)
		must(t, f.Truncate(sparseSize))
		_, err = f.WriteAt([]byte(strings.Repeat("data", 1<<18)), dataAt) // 1 MiB in the middle
		must(t, err)
		must(t, f.Close())
		f, err = os.Create(filepath.Join(vol, "huge"))
		must(t, err)
		for _, off := range []int64{0, 1 << 35, 1<<40 - 4} {
			_, err = f.WriteAt([]byte("huge"), off)
			must(t, err)
		}
		must(t, f.Close())
	}
	c := fstest.NewClusterCopy(t, 1, seed, false)
	c.RequireConverged()
	if took := resyncTook(t, c.Primary.Out.String()); took > 10*time.Second {
		t.Errorf("the resync took %v", took)
	}
	if !strings.Contains(c.Primary.Out.String(), "resync done") {
		t.Fatalf("no resync:\n%s", c.Primary.Out)
	}
	var p, b unix.Stat_t
	must(t, unix.Stat(filepath.Join(c.Vol, "sparse"), &p))
	must(t, unix.Stat(filepath.Join(c.Backups[0].Vol, "sparse"), &b))
	if b.Blocks > 2*p.Blocks+2048 {
		t.Fatalf("the resynced sparse file takes %d KiB on the backup, %d KiB on the primary", b.Blocks/2, p.Blocks/2)
	}
}

// TestBackupVolumeServedTwiceRefused: a second backup on a volume a first
// one serves is refused; both would apply every batch.
func TestBackupVolumeServedTwiceRefused(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	b := c.Backups[0]
	out, code := run(t, "backup", "--listen", fstest.FreeAddr(t), "--journal", filepath.Join(c.Dir, "other-journal"), "--token", fstest.TestToken, b.Vol)
	if code != 1 || !strings.Contains(out, "another pbfs process serves this volume") {
		t.Fatalf("second backup on one volume: exit %d:\n%s", code, out)
	}
	c.RequireConverged()
}

// resyncTook reads how long the primary's first resync took from its log.
func resyncTook(t *testing.T, log string) time.Duration {
	t.Helper()
	_, rest, ok := strings.Cut(log, "resync done")
	if !ok {
		t.Fatalf("no resync:\n%s", log)
	}
	_, rest, _ = strings.Cut(rest, "took=")
	d, err := time.ParseDuration(strings.Fields(rest + " ")[0])
	if err != nil {
		t.Fatalf("resync line: %v", err)
	}
	return d
}

// Names that are not UTF-8 (a Latin-1 file name, a symlink to one, an
// extended attribute named so) are names like any other: a resync carries
// them (it failed on every such name, for good, before the protocol took
// names as bytes), batches carry them, and verify compares them and names
// one that differs.
func TestNamesNotUTF8(t *testing.T) {
	dir, file, link := "d\xe9j\xe0", "\xff\xfe caf\xe9", "lien \xe9"
	seed := func(vol string) {
		must(t, os.Mkdir(filepath.Join(vol, dir), 0o755))
		must(t, os.WriteFile(filepath.Join(vol, dir, file), []byte("latin-1"), 0o644))
		must(t, os.Symlink(file, filepath.Join(vol, dir, link)))
		must(t, unix.Setxattr(filepath.Join(vol, dir, file), "user.\xe9t\xe9", []byte("summer"), 0))
	}
	c := fstest.NewClusterCopy(t, 1, seed, false)
	c.RequireConverged()
	if !strings.Contains(c.Primary.Out.String(), "resync done") {
		t.Fatalf("no resync:\n%s", c.Primary.Out)
	}
	must(t, os.WriteFile(filepath.Join(c.Vol, dir, "live \xfc"), []byte("after"), 0o644))
	c.RequireConverged()
	out, code := run(t, "verify", "--journal", c.Jdir, "--token", fstest.TestToken)
	if code != 0 || !strings.Contains(out, "identical") {
		t.Fatalf("verify: exit %d:\n%s", code, out)
	}
	c.SkipChecks(t, "a backup altered behind pbfs's back, for verify to find")
	must(t, os.WriteFile(filepath.Join(c.Backups[0].Vol, dir, file), []byte("altered"), 0o644))
	out, code = run(t, "verify", "--journal", c.Jdir, "--token", fstest.TestToken)
	if code != 1 || !strings.Contains(out, "  "+dir+"/"+file+": contents differ") {
		t.Fatalf("verify of an altered file: exit %d:\n%q", code, out)
	}
}

// The first resync of a backup that has never served a volume makes its
// directory a copy of the primary's and removes the rest: into a directory
// that already holds files it is refused, with a log line, a metric and a
// reason the primary shows, until the backup is started with --adopt. A
// backup pointed at the wrong directory lost all of it before.
func TestFirstResyncRefusesForeignVolume(t *testing.T) {
	c := fstest.NewClusterCopy(t, 1, func(vol string) {
		must(t, os.WriteFile(filepath.Join(vol, "x"), []byte("the primary's"), 0o644))
	}, false)
	c.RequireConverged()
	b := c.Backups[0]
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	// Its journal lost: a backup that never served this directory, which
	// now holds files of its own.
	must(t, os.RemoveAll(b.Jdir))
	precious := filepath.Join(b.Vol, "precious")
	must(t, os.WriteFile(precious, []byte("not the primary's"), 0o644))
	c.StartBackup(b)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(b.Out.String(), "refused the first resync") {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal; backup log:\n%s\nprimary log:\n%s", b.Out, c.Primary.Out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, _ := run(t, "status", "--journal", c.Jdir)
	if !strings.Contains(out, "--adopt") || !strings.Contains(out, "refused since") || strings.Contains(out, "unreachable") {
		t.Errorf("the primary's status does not say the backup refused, and why:\n%s", out)
	}
	if got, err := os.ReadFile(precious); err != nil || string(got) != "not the primary's" {
		t.Fatalf("the refused resync touched the volume: %q %v", got, err)
	}
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	b.Args = []string{"--adopt"}
	c.StartBackup(b)
	// A new batch, so that the barrier RequireConverged takes waits for
	// this backup session (its predecessor acked everything before).
	must(t, os.WriteFile(filepath.Join(c.Vol, "y"), []byte("after"), 0o644))
	c.RequireConverged()
	if _, err := os.Stat(precious); !os.IsNotExist(err) {
		t.Errorf("an adopted volume kept what the primary lacks: %v", err)
	}
}
