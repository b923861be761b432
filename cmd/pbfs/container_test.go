package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// The container recipe (docs/CONTAINERS.md), tested: a "container" (a
// mount namespace of its own, made with unshare, its mounts slaves of the
// host's) starts before pbfs mounts the volume; the mount propagates into
// it because the volume's parent is a shared mount; a process there, as
// another uid, writes through it thanks to --allow-other; the write is
// replicated with its owner. Without --allow-other the same write is
// refused, so the test can fail.
func TestContainerRecipe(t *testing.T) {
	fstest.RequireFUSE(t)
	for _, tool := range []string{"unshare", "setpriv", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s (util-linux) is needed: %v", tool, err)
		}
	}
	shared := t.TempDir()
	// The other uid must be able to walk down to the volume.
	openUp(t, shared, filepath.Dir(shared))
	// The host side of the recipe: the volume's parent is a shared mount.
	for _, args := range [][]string{{"--bind", shared, shared}, {"--make-rshared", shared}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v\n%s", args, err, out)
		}
	}
	t.Cleanup(func() { syscall.Unmount(shared, syscall.MNT_DETACH) })
	vol := filepath.Join(shared, "vol")
	must(t, os.Mkdir(vol, 0o755))

	// The container starts first and waits for the volume to appear;
	// then it binds the mountpoint where its service expects its data,
	// as a runtime's volume mount does, and writes there as uid 1000.
	inner := filepath.Join(shared, "container-data")
	must(t, os.Mkdir(inner, 0o755))
	script := fmt.Sprintf(`for i in $(seq 400); do [ -e %[1]s/app/.ready ] && break; sleep 0.05; done
mount --bind %[1]s %[2]s || exit 3
exec setpriv --reuid 1000 --regid 1000 --clear-groups sh -c 'echo from-the-container > %[2]s/app/data'`, vol, inner)
	ctr := exec.Command("unshare", "--mount", "--propagation", "slave", "sh", "-c", script)
	out := &fstest.Buffer{}
	ctr.Stdout, ctr.Stderr = out, out
	must(t, ctr.Start())
	done := make(chan error, 1)
	go func() { done <- ctr.Wait() }()
	t.Cleanup(func() { ctr.Process.Kill() })

	bvol, baddr := filepath.Join(t.TempDir(), "copy"), fstest.FreeAddr(t)
	must(t, os.Mkdir(bvol, 0o755))
	backup := exec.Command(pbfsBin, "backup", "--listen", baddr, "--journal", filepath.Join(t.TempDir(), "jb"), "--token", fstest.TestToken, bvol)
	bout := &fstest.Buffer{}
	backup.Stdout, backup.Stderr = bout, bout
	must(t, backup.Start())
	t.Cleanup(func() { backup.Process.Signal(os.Interrupt); backup.Wait() })
	p := fstest.StartMount(t, nil, vol, filepath.Join(t.TempDir(), "j"), "--allow-other", "--backup", baddr, "--token", fstest.TestToken)
	app := filepath.Join(vol, "app")
	must(t, os.Mkdir(app, 0o755))
	must(t, os.Chown(app, 1000, 1000))
	must(t, os.WriteFile(filepath.Join(app, ".ready"), nil, 0o644))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the container's write failed: %v\n%s", err, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the container never saw the volume:\n%s", out)
	}
	// Replicated with its owner.
	p.Barrier()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st syscall.Stat_t
		err := syscall.Stat(filepath.Join(bvol, "app", "data"), &st)
		data, _ := os.ReadFile(filepath.Join(bvol, "app", "data"))
		if err == nil && st.Uid == 1000 && string(data) == "from-the-container\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backup's copy: uid %d %q %v\nbackup:\n%s", st.Uid, data, err, bout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The container's bind stays in its namespace.
	if fstest.Mounted(inner) {
		t.Error("the container's bind mount leaked to the host")
	}

	// Without --allow-other, the other uid is refused.
	plain := filepath.Join(shared, "plain")
	must(t, os.Mkdir(plain, 0o777))
	fstest.StartMount(t, nil, plain, filepath.Join(t.TempDir(), "j2"))
	cmd := exec.Command("setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "sh", "-c", "echo x > "+plain+"/f")
	if o, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("another uid wrote into a mount without --allow-other:\n%s", o)
	}
}
