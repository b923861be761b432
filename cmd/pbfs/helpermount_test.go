package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// helperVolume is a backing directory, a mount point, a journal, a log
// and a backup to replicate to, for the mount helper's tests.
type helperVolume struct {
	src, mnt, jdir, log, tokenFile string
	backup                         *fstest.BackupProc
}

func newHelperVolume(t *testing.T) *helperVolume {
	dir := t.TempDir()
	v := &helperVolume{src: filepath.Join(dir, "src"), mnt: filepath.Join(dir, "mnt"), jdir: filepath.Join(dir, "j"),
		log: filepath.Join(dir, "pbfs.log"), tokenFile: filepath.Join(dir, "token")}
	for _, d := range []string{v.src, v.mnt} {
		must(t, os.Mkdir(d, 0o755))
	}
	must(t, os.WriteFile(v.tokenFile, []byte(fstest.TestToken), 0o600))
	b := &fstest.BackupProc{Addr: fstest.FreeAddr(t), Vol: filepath.Join(dir, "copy"), Jdir: filepath.Join(dir, "jb"), Out: &fstest.Buffer{}}
	must(t, os.Mkdir(b.Vol, 0o755))
	b.Cmd = exec.Command(pbfsBin, "backup", "--listen", b.Addr, "--journal", b.Jdir, "--token", fstest.TestToken, b.Vol)
	b.Cmd.Stdout, b.Cmd.Stderr = b.Out, b.Out
	must(t, b.Cmd.Start())
	t.Cleanup(func() { fstest.StopProcess(b.Cmd, os.Interrupt, 20*time.Second) })
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", b.Addr); err == nil {
			c.Close()
			break
		}
		if i == 200 {
			t.Fatalf("the backup did not come up:\n%s", b.Out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	v.backup = b
	return v
}

// opts are the volume's mount options.
func (v *helperVolume) opts() string {
	return "journal=" + v.jdir + ",backup=" + v.backup.Addr + ",token_file=" + v.tokenFile + ",log=" + v.log + ",noatime,_netdev,nofail,x-systemd.after=network-online.target"
}

// daemon finds the pbfs that serves the volume: the process whose
// command line names its journal.
func (v *helperVolume) daemon(t *testing.T) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(p)
		if bytes.Contains(cmdline, []byte("\x00mount\x00")) && bytes.Contains(cmdline, []byte("--journal="+v.jdir+"\x00")) {
			var pid int
			fmt.Sscanf(p, "/proc/%d/", &pid)
			return pid
		}
	}
	t.Fatalf("no pbfs process serves %s", v.mnt)
	return 0
}

// barrier takes a barrier: the backup holds what was written.
func (v *helperVolume) barrier(t *testing.T) {
	t.Helper()
	if out, code := run(t, "barrier", "--journal", v.jdir); code != 0 {
		log, _ := os.ReadFile(v.log)
		t.Fatalf("barrier: exit %d: %s\n%s", code, out, log)
	}
}

// requireOnBackup waits until the backup holds name with data.
func (v *helperVolume) requireOnBackup(t *testing.T, name string, data []byte) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got, _ := os.ReadFile(filepath.Join(v.backup.Vol, name)); bytes.Equal(got, data) {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(v.log)
			t.Fatalf("%s never reached the backup:\n%s\nbackup:\n%s", name, log, v.backup.Out)
		}
	}
}

// TestMountHelper: `mount -t fuse.pbfs SRC MNT -o ...` (here a type of
// the test's own, whose helper is the pbfs under test) mounts SRC at MNT,
// returns once it is served, and leaves pbfs running in the background,
// logging to log=FILE; findmnt finds the mount by its source; umount(8)
// unmounts it and pbfs exits 0 with everything shipped. An fstab entry
// (mount -T FILE) mounts the same, and `umount; mount` of it needs no
// wait between. A mount that fails says why and exits non-zero.
func TestMountHelper(t *testing.T) {
	typ := helperSetup(t)
	v := newHelperVolume(t)
	out, code := mountCmd(t, "mount", "-v", "-t", typ, "-o", v.opts(), v.src, v.mnt)
	if code != 0 || !fstest.Mounted(v.mnt) {
		log, _ := os.ReadFile(v.log)
		t.Fatalf("mount -t %s: exit %d:\n%s\nlog:\n%s", typ, code, out, log)
	}
	pid := daemonPid(t, out)
	if got, _ := exec.Command("findmnt", "-n", "-o", "TARGET", "-S", v.src).Output(); strings.TrimSpace(string(got)) != v.mnt {
		t.Fatalf("findmnt -S %s: %q, want %s", v.src, got, v.mnt)
	}
	data := bytes.Repeat([]byte("through mount(8)\n"), 1000)
	must(t, os.WriteFile(filepath.Join(v.mnt, "f"), data, 0o644))
	v.barrier(t) // the backup is in step (its first resync is over)
	if out, code := mountCmd(t, "umount", v.mnt); code != 0 {
		t.Fatalf("umount: exit %d: %s", code, out)
	}
	if code := reap(t, pid, v.log); code != 0 {
		log, _ := os.ReadFile(v.log)
		t.Fatalf("the daemon exited %d after umount:\n%s", code, log)
	}
	v.requireOnBackup(t, "f", data)

	// The same as an fstab entry, unmounted and mounted again at once.
	fstab := filepath.Join(t.TempDir(), "fstab")
	must(t, os.WriteFile(fstab, []byte("# pbfs\n"+v.src+" "+v.mnt+" "+typ+" "+v.opts()+" 0 0\n"), 0o644))
	var pids []int
	for round := 0; round < 3; round++ {
		out, code := mountCmd(t, "mount", "-v", "-T", fstab, v.mnt)
		if code != 0 {
			log, _ := os.ReadFile(v.log)
			t.Fatalf("round %d: mount -T fstab: exit %d:\n%s\nlog:\n%s", round, code, out, log)
		}
		pids = append(pids, daemonPid(t, out))
		if got, err := os.ReadFile(filepath.Join(v.mnt, "f")); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round %d: f through the remount: %v", round, err)
		}
		must(t, os.WriteFile(filepath.Join(v.mnt, "g"), []byte{byte(round)}, 0o644))
		if out, code := mountCmd(t, "umount", v.mnt); code != 0 {
			t.Fatalf("round %d: umount: exit %d: %s", round, code, out)
		}
	}
	for _, pid := range pids {
		if code := reap(t, pid, v.log); code != 0 {
			log, _ := os.ReadFile(v.log)
			t.Fatalf("a daemon exited %d after umount:\n%s", code, log)
		}
	}
	v.requireOnBackup(t, "g", []byte{2})
	log, _ := os.ReadFile(v.log)
	if strings.Contains(string(log), "did not shut down cleanly") || strings.Contains(string(log), "holds it") || strings.Count(string(log), "msg=unmounted ") != 4 {
		t.Fatalf("four mounts, each unmounted cleanly, want:\n%s", log)
	}

	// Failures: a usage mistake (status 1), a mount refused (32).
	for _, tc := range []struct {
		opts string
		code int
		says string
	}{
		{"log=" + v.log, 1, `Required flag "journal" not set`},
		{"journal=" + v.jdir + ",log=" + v.log + ",bogus", 1, `unknown option "bogus"`},
		{"journal=" + filepath.Join(v.src, "j") + ",log=" + v.log, 1, "journal directory is inside the volume"},
	} {
		out, code := mountCmd(t, "mount", "-t", typ, "-o", tc.opts, v.src, v.mnt)
		if code != tc.code || !strings.Contains(out, tc.says) || fstest.Mounted(v.mnt) {
			t.Errorf("mount -o %s: exit %d, want %d saying %q:\n%s", tc.opts, code, tc.code, tc.says, out)
		}
	}
	p := startMount(t, nil, v.mnt, filepath.Join(t.TempDir(), "j2"), "--backing", v.src)
	other := filepath.Join(t.TempDir(), "other")
	must(t, os.Mkdir(other, 0o755))
	out, code = mountCmd(t, "mount", "-t", typ, "-o", "journal="+filepath.Join(t.TempDir(), "j3")+",log="+v.log, v.src, other)
	if code != 32 || !strings.Contains(out, "the pbfs mount at "+v.mnt+" serves it") {
		t.Errorf("mount of a backing directory another pbfs serves: exit %d, want 32:\n%s", code, out)
	}
	p.Stop()
}

// TestMountFuse3RunsPbfs: without the mount.fuse.pbfs link, mount(8)
// runs fuse3's mount.fuse3 for type fuse.pbfs, which runs `pbfs SRC MNT
// -o OPTS` from the PATH; pbfs takes that as the helper's call.
func TestMountFuse3RunsPbfs(t *testing.T) {
	helperSetup(t) // only to reap the daemon
	v := newHelperVolume(t)
	cmd := exec.Command("mount.fuse3", v.src, v.mnt, "-t", "fuse.pbfs", "-o", v.opts())
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(pbfsBin)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil || !fstest.Mounted(v.mnt) {
		log, _ := os.ReadFile(v.log)
		t.Fatalf("mount.fuse3: %v:\n%s\nlog:\n%s", err, out, log)
	}
	must(t, os.WriteFile(filepath.Join(v.mnt, "f"), []byte("through mount.fuse3"), 0o644))
	v.barrier(t)
	pid := v.daemon(t)
	if out, code := mountCmd(t, "umount", v.mnt); code != 0 {
		t.Fatalf("umount: exit %d: %s", code, out)
	}
	if code := reap(t, pid, v.log); code != 0 {
		log, _ := os.ReadFile(v.log)
		t.Fatalf("the daemon exited %d after umount:\n%s", code, log)
	}
	v.requireOnBackup(t, "f", []byte("through mount.fuse3"))
}
