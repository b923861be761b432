package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/dockertest"
	"github.com/pbfs/pbfs/internal/fstest"
)

// TestVolumeDriver runs a real Docker engine against `pbfs volume-driver`:
// bad input refused with the remedy, containers sharing a volume and
// writing as another uid, one stopped while it writes, the driver and a
// container killed mid-write, the driver's socket gone. One engine serves
// every part (it takes seconds to start).
func TestVolumeDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Docker engine (about a minute)")
	}
	d := startDriver(t)
	e := dockertest.Start(t) // stopped first: its containers' unmounts reach the driver
	b := fstest.NewBackup(t)
	t.Run("BadInput", func(t *testing.T) { volumeBadInput(t, e, d, b) })
	t.Run("Containers", func(t *testing.T) { volumeContainers(t, e, d, b) })
	b2 := fstest.NewBackup(t)
	t.Run("KillMidWrite", func(t *testing.T) { volumeKillMidWrite(t, e, d, b2) })
	t.Run("DriverUnreachable", func(t *testing.T) { volumeDriverUnreachable(t, e, d) })
}

// volumeBadInput: each mistake gets a clear error from docker volume
// create, and nothing is created.
func volumeBadInput(t *testing.T, e *dockertest.Engine, d *driverProc, b *fstest.BackupProc) {
	create := []string{"volume", "create", "--driver", d.name}
	refused(t, e, `bad volume option "colour": unknown; want one of`, append(create, "--opt", "colour=blue", "bad1")...)
	refused(t, e, "list every backup in one option, backups=HOST:PORT,HOST:PORT", append(create, "--opt", "backup="+b.Addr, "bad2")...)
	missing := fstest.FreeAddr(t)
	refused(t, e, "backup "+missing+" does not answer", append(create, "--opt", "backups="+b.Addr+","+missing, "bad3")...)
	// A name the engine's own driver holds.
	docker(t, e, "volume", "create", "taken")
	refused(t, e, "already has volume", append(create, "--opt", "backups="+b.Addr, "taken")...)
	docker(t, e, "volume", "rm", "taken")
	if ents, _ := os.ReadDir(d.state); len(ents) != 0 {
		t.Fatalf("refused creations left %v in the state directory", ents)
	}
	// (The engine lists every driver's volumes, whichever engine made them.)
	if out := docker(t, e, "volume", "ls", "-q", "--filter", "driver="+d.name); out != "" {
		t.Fatalf("refused creations left volumes: %s", out)
	}
}

// volumeContainers: two containers share a volume (reference counted);
// docker volume rm refuses it while one holds it; inspect shows its
// replication; a container writing as uid 1000 is stopped mid-write; after
// the last container goes the backup holds every file, owner and mode
// included.
func volumeContainers(t *testing.T, e *dockertest.Engine, d *driverProc, b *fstest.BackupProc) {
	docker(t, e, "volume", "create", "--driver", d.name, "--opt", "backups="+b.Addr, "db")
	docker(t, e, "run", "-d", "--name", "holder", "--network", "none", "-v", "db:/data", dockertest.Image, "sleep", "600")
	// A second container, as an image's entrypoint would, prepares the
	// service's directory, and goes; the volume stays mounted for the first.
	docker(t, e, "run", "--rm", "--network", "none", "-v", "db:/data", dockertest.Image, "sh", "-c", "mkdir /data/app && chown 1000:1000 /data/app")
	if !fstest.Mounted(d.data("db")) {
		t.Fatal("the volume was unmounted while a container still held it")
	}
	refused(t, e, "in use", "volume", "rm", "db")
	refused(t, e, "in use", "volume", "rm", "-f", "db")
	docker(t, e, "run", "-d", "--name", "writer", "--network", "none", "--user", "1000:1000", "-v", "db:/data", dockertest.Image,
		"sh", "-c", "umask 027; i=0; while :; do i=$((i+1)); echo line-$i > /data/app/f$i; done")
	st := inspect(t, e, "db")
	if !st.Status.Mounted || st.Status.Containers != 2 || len(st.Status.Backups) != 1 || st.Status.Backups[0].Addr != b.Addr || st.Mountpoint != d.data("db") {
		t.Fatalf("inspect of a mounted volume: %+v", st)
	}
	waitFiles(t, filepath.Join(d.data("db"), "app"), 50)
	// sh as a container's pid 1 ignores SIGTERM: stopped by SIGKILL, mid-write.
	docker(t, e, "stop", "-t", "1", "writer")
	docker(t, e, "rm", "-f", "holder", "writer")
	d.awaitUnmounted(t, e, "db", 30*time.Second)
	fstest.AwaitEqual(t, d.data("db"), b.Vol)
	var fst syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(b.Vol, "app", "f1"), &fst))
	if fst.Uid != 1000 || fst.Gid != 1000 || fst.Mode&0o777 != 0o640 {
		t.Fatalf("the backup's copy of a container's file: uid %d gid %d mode %o", fst.Uid, fst.Gid, fst.Mode&0o777)
	}
	if st := inspect(t, e, "db"); st.Status.Mounted || st.Status.Containers != 0 {
		t.Fatalf("inspect after the last container: %+v", st)
	}
	docker(t, e, "volume", "rm", "db")
	if _, err := os.Stat(filepath.Join(d.state, "db")); !os.IsNotExist(err) {
		t.Fatalf("docker volume rm left the volume's directory: %v", err)
	}
}

// waitFiles waits until dir holds at least n entries.
func waitFiles(t *testing.T, dir string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ents, _ := os.ReadDir(dir)
		if len(ents) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d entries, want %d", dir, len(ents), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// volumeKillMidWrite: a container writes files with fsync=replicated and
// records each in a ledger once its fsync returned. The driver is killed
// (the container keeps writing: its mount outlives the driver), restarted
// (it adopts the mount), then killed together with the container; once
// restarted it gets the engine's unmount, and the backup holds every
// acknowledged file.
func volumeKillMidWrite(t *testing.T, e *dockertest.Engine, d *driverProc, b *fstest.BackupProc) {
	ledger := t.TempDir()
	docker(t, e, "volume", "create", "--driver", d.name, "--opt", "backups="+b.Addr, "--opt", "fsync=replicated", "kv")
	docker(t, e, "run", "-d", "--name", "kv", "--network", "none", "-v", "kv:/data", "-v", ledger+":/ledger", dockertest.Image,
		"sh", "-c", "i=0; while :; do i=$((i+1)); echo acknowledged-$i > /data/f$i; sync /data/f$i && echo $i >> /ledger/acked; done")
	acked := func() int { return len(readLedger(t, ledger)) }
	waitFor(t, "20 acknowledged writes", func() bool { return acked() >= 20 })
	d.kill()
	n := acked()
	waitFor(t, "writes acknowledged while the driver is dead", func() bool { return acked() >= n+10 })
	d.start(t)
	if st := inspect(t, e, "kv"); !st.Status.Mounted || st.Status.Containers != 1 || st.Status.LastSeq == 0 {
		t.Fatalf("the restarted driver did not adopt the mount: %+v\n%s", st, d.out)
	}
	n = acked()
	waitFor(t, "writes acknowledged after the restart", func() bool { return acked() >= n+10 })
	// Both at once, mid-write. The engine's unmount of the container finds
	// no driver and retries (for 15 s: 1, 2, 4 and 8 s apart); `docker kill`
	// returns only after that.
	d.kill()
	stopped := e.Start("kill", "kv")
	time.Sleep(time.Second)
	d.start(t)
	stopped.Wait()
	d.awaitUnmounted(t, e, "kv", 60*time.Second)
	entries := readLedger(t, ledger)
	deadline := time.Now().Add(20 * time.Second)
	for _, i := range entries {
		want := "acknowledged-" + i + "\n"
		for {
			got, err := os.ReadFile(filepath.Join(b.Vol, "f"+i))
			if err == nil && string(got) == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("acknowledged write f%s is not on the backup: %q %v (ledger holds %d)\ndriver:\n%s", i, got, err, len(entries), d.out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("%d acknowledged writes on the backup", len(entries))
	docker(t, e, "rm", "kv")
	docker(t, e, "volume", "rm", "kv")
}

// readLedger returns the ledger's complete lines.
func readLedger(t *testing.T, dir string) []string {
	data, err := os.ReadFile(filepath.Join(dir, "acked"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	s := string(data)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	} else {
		return nil
	}
	lines := strings.Split(s, "\n")
	for _, l := range lines {
		if _, err := strconv.Atoi(l); err != nil {
			t.Fatalf("ledger line %q", l)
		}
	}
	return lines
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// volumeDriverUnreachable: with the driver stopped, docker run of one of
// its volumes fails saying the driver's socket cannot be reached, and
// starts nothing; a container that stops meanwhile has its unmount lost
// (the engine gives up after 15 s), and the driver, back, finds that no
// container uses the volume and unmounts it.
func volumeDriverUnreachable(t *testing.T, e *dockertest.Engine, d *driverProc) {
	docker(t, e, "volume", "create", "--driver", d.name, "--opt", "backups=none", "gone")
	docker(t, e, "volume", "create", "--driver", d.name, "--opt", "backups=none", "other")
	docker(t, e, "run", "-d", "--name", "lost", "--network", "none", "-v", "gone:/data", dockertest.Image, "sleep", "600")
	d.stop()
	stopping := e.Start("stop", "-t", "0", "lost")
	// Another volume: the engine takes one volume's calls one at a time.
	refused(t, e, d.socket, "run", "--rm", "--network", "none", "-v", "other:/data", dockertest.Image, "true")
	if out := docker(t, e, "ps", "-a", "--format", "{{.Names}}"); out != "lost" {
		t.Fatalf("containers made without their volume's driver: %s", out)
	}
	stopping.Wait()
	if !fstest.Mounted(d.data("gone")) {
		t.Fatal("the volume's mount did not outlive its driver")
	}
	d.start(t)
	d.awaitUnmounted(t, e, "gone", 30*time.Second)
	docker(t, e, "rm", "lost")
	docker(t, e, "volume", "rm", "gone", "other")
}
