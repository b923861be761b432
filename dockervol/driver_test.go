package dockervol

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// These tests drive the driver as an engine would, through its protocol
// or its methods, with real pbfs mount and backup processes; the engine
// itself is in cmd/pbfs's TestVolumeDriver tests.

func TestMain(m *testing.M) { os.Exit(fstest.Main(m)) }

// newDriver opens a driver on a state directory of its own whose volumes
// replicate with the test token; every mount it started is stopped in
// Cleanup.
func newDriver(t *testing.T) (*Driver, Config) {
	t.Helper()
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	must(t, os.WriteFile(token, []byte(fstest.TestToken), 0o600))
	cfg := Config{StateDir: filepath.Join(dir, "s"), Exe: fstest.Binary(t), Defaults: Options{"token-file": token},
		StopTimeout: 20 * time.Second}
	d, err := New(cfg)
	must(t, err)
	t.Cleanup(func() { stopAll(cfg.StateDir) })
	return d, cfg
}

// stopAll stops every mount serving a volume of state, as a test leaves
// nothing behind.
func stopAll(state string) {
	names, _, _ := volumeNames(state)
	for _, n := range names {
		p := paths{filepath.Join(state, n)}
		if pid := findServer(p.journal()); pid != 0 {
			adoptServer(pid).stop(20 * time.Second)
		}
		fstest.DetachAll(p.data())
	}
}

// call sends one request of the protocol and returns the answer's Err.
func call(t *testing.T, h http.Handler, method string, body any) (map[string]any, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+method, bytes.NewReader(b)))
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s: answer %q: %v", method, rec.Body, err)
	}
	e, _ := out["Err"].(string)
	if (e != "") != (rec.Code != http.StatusOK) {
		t.Fatalf("%s: status %d with Err %q", method, rec.Code, e)
	}
	return out, e
}

// Bad input at creation gets an error that says what to do, and leaves
// nothing in the state directory.
func TestCreateRefusesBadInput(t *testing.T) {
	d, cfg := newDriver(t)
	b := fstest.NewBackup(t)
	h := Handler(d)
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"v1", Options{"colour": "blue"}, "unknown; want one of"},
		{"v1", Options{"backup": b.Addr}, "backups=HOST:PORT,HOST:PORT"},
		{"v1", Options{"token": "x"}, "token-file=FILE"},
		{"v1", Options{"backups": "nocolon"}, "not HOST:PORT"},
		{"v1", Options{"backups": b.Addr, "ack": "3"}, "ack=3 with 1 backups"},
		{"v1", Options{"fsync": "always"}, "want local, replicated, both or deferred"},
		{"v1", Options{"backups": fstest.FreeAddr(t)}, "does not answer"},
		{"v1", Options{"backups": b.Addr, "token-file": "/nonexistent"}, "read token file"},
		{"-bad", nil, "use letters, digits"},
		{strings.Repeat("n", 120), nil, "too long"},
	} {
		_, e := call(t, h, "VolumeDriver.Create", map[string]any{"Name": c.name, "Opts": c.opts})
		if !strings.Contains(e, c.want) {
			t.Errorf("create %s %v: Err %q, want %q in it", c.name, c.opts, e, c.want)
		}
	}
	if ents, _ := os.ReadDir(cfg.StateDir); len(ents) != 0 {
		t.Fatalf("refused creations left %v", ents)
	}
	// Creating again with the same options is no error; with others it is.
	must(t, d.Create("v1", Options{"backups": b.Addr}))
	must(t, d.Create("v1", Options{"backups": b.Addr}))
	if err := d.Create("v1", Options{"backups": "none"}); !errors.Is(err, ErrExists) {
		t.Fatalf("create with other options: %v, want ErrExists", err)
	}
	if _, e := call(t, h, "VolumeDriver.Mount", map[string]any{"Name": "nope", "ID": "c1"}); !strings.Contains(e, "no such volume") {
		t.Fatalf("mount of an unknown volume: %q", e)
	}
}

// Two containers share one mount; the volume is refused removal while
// either holds it; the last one's unmount leaves the backup holding every
// file, owner and mode included.
func TestMountCountsReferences(t *testing.T) {
	d, _ := newDriver(t)
	b := fstest.NewBackup(t)
	must(t, d.Create("db", Options{"backups": b.Addr}))
	p1, err := d.Mount("db", "c1")
	must(t, err)
	p2, err := d.Mount("db", "c2")
	must(t, err)
	if p1 != p2 || !fstest.Mounted(p1) {
		t.Fatalf("two mounts of one volume: %q and %q (mounted: %v)", p1, p2, fstest.Mounted(p1))
	}
	must(t, os.WriteFile(filepath.Join(p1, "f"), []byte("data"), 0o640))
	must(t, os.Chown(filepath.Join(p1, "f"), 1000, 1001))
	if err := d.Remove("db"); !errors.Is(err, ErrInUse) {
		t.Fatalf("remove of a mounted volume: %v", err)
	}
	info, err := d.Get("db")
	must(t, err)
	bs, _ := info.Status["backups"].([]backupInfo)
	if info.Mountpoint != p1 || info.Status["containers"] != 2 || len(bs) != 1 || bs[0].Addr != b.Addr {
		t.Fatalf("status of a mounted volume: %+v", info)
	}
	must(t, d.Unmount("db", "c1"))
	if !fstest.Mounted(p1) {
		t.Fatal("the first of two unmounts unmounted the volume")
	}
	must(t, d.Unmount("db", "c2"))
	must(t, d.Unmount("db", "c2")) // asked twice: no error
	if fstest.Mounted(p1) {
		t.Fatal("the last unmount left the volume mounted")
	}
	fstest.AwaitEqual(t, p1, b.Vol)
	must(t, d.Remove("db"))
	if _, err := d.Get("db"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after remove: %v", err)
	}
}

// A driver started over volumes a killed driver left mounted adopts them:
// the mount a container (a mount namespace of its own) uses keeps
// serving, and the new driver's unmount stops it after a barrier. A mount
// counted as held that no container uses any more (the engine's unmount
// was lost while no driver answered) is unmounted. A volume whose mount
// died too is cleared and mounts again.
func TestRestartAdopts(t *testing.T) {
	d, cfg := newDriver(t)
	b := fstest.NewBackup(t)
	must(t, d.Create("live", Options{"backups": b.Addr}))
	must(t, d.Create("stale", nil))
	must(t, d.Create("dead", nil))
	live, err := d.Mount("live", "c1")
	must(t, err)
	// The container starts now: its namespace holds a copy of the live
	// volume's mount, and of no later one.
	ctr := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "600")
	must(t, ctr.Start())
	t.Cleanup(func() { ctr.Process.Kill(); ctr.Wait() })
	waitFor(t, func() bool { return inContainers(live) })
	stale, err := d.Mount("stale", "c2")
	must(t, err)
	dead, err := d.Mount("dead", "c3")
	must(t, err)
	livePid := findServer(d.vols["live"].p.journal())
	fstest.KillHard(findServer(d.vols["dead"].p.journal()))
	waitGone(t, d.vols["dead"].srv)

	d2, err := New(cfg) // the first driver is gone as far as the volumes know
	must(t, err)
	info, err := d2.Get("live")
	must(t, err)
	if info.Mountpoint != live || info.Status["pid"] != livePid {
		t.Fatalf("the new driver did not adopt the running mount: %+v (pid %d)", info, livePid)
	}
	must(t, os.WriteFile(filepath.Join(live, "after-restart"), []byte("x"), 0o600))
	if info, _ := d2.Get("stale"); info.Mountpoint != "" || info.Status["containers"] != 0 || fstest.Mounted(stale) {
		t.Fatalf("a mount no container uses: %+v, mounted %v", info, fstest.Mounted(stale))
	}
	if info, _ := d2.Get("dead"); info.Mountpoint != "" || info.Status["containers"] != 1 || fstest.Mounted(dead) {
		t.Fatalf("a dead mount: %+v, mounted %v", info, fstest.Mounted(dead))
	}
	if _, err := os.ReadDir(dead); err != nil {
		t.Fatalf("the dead mount was not cleared: %v", err)
	}
	// The container goes; the engine unmounts.
	ctr.Process.Kill()
	ctr.Wait()
	must(t, d2.Unmount("live", "c1"))
	fstest.AwaitEqual(t, live, b.Vol)
	// The dead volume mounts again for the next container; its old
	// container's unmount is accepted.
	_, err = d2.Mount("dead", "c4")
	must(t, err)
	must(t, d2.Unmount("dead", "c3"))
	must(t, d2.Unmount("dead", "c4"))
	if fstest.Mounted(dead) {
		t.Fatal("still mounted after the last unmount")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 400 {
			t.Fatal("timed out")
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func waitGone(t *testing.T, s *server) {
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("killed mount still runs")
	}
}

// A mount that fails to start (its token file went away since the volume
// was created) leaves nothing mounted and no count, and the engine gets
// the mount's own words.
func TestMountFailureLeavesNothing(t *testing.T) {
	d, _ := newDriver(t)
	b := fstest.NewBackup(t)
	token := filepath.Join(t.TempDir(), "token")
	must(t, os.WriteFile(token, []byte(fstest.TestToken), 0o600))
	must(t, d.Create("bad", Options{"backups": b.Addr, "token-file": token}))
	must(t, os.Remove(token))
	_, err := d.Mount("bad", "c1")
	if err == nil || !strings.Contains(err.Error(), "pbfs mount exited") || !strings.Contains(err.Error(), "token") {
		t.Fatalf("mount without its token file: %v", err)
	}
	t.Log(err)
	info, _ := d.Get("bad")
	if info.Status["containers"] != 0 || info.Mountpoint != "" || fstest.Mounted(d.vols["bad"].p.data()) {
		t.Fatalf("a failed mount left %+v", info)
	}
	must(t, d.Remove("bad"))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The sample defaults file (etc/volume-driver.yaml) loads, its token file
// put where this machine has one.
func TestSampleDefaults(t *testing.T) {
	data, err := os.ReadFile("../etc/volume-driver.yaml")
	must(t, err)
	dir := t.TempDir()
	token, sample := filepath.Join(dir, "token"), filepath.Join(dir, "defaults.yaml")
	must(t, os.WriteFile(token, []byte(fstest.TestToken), 0o600))
	must(t, os.WriteFile(sample, bytes.ReplaceAll(data, []byte("/etc/pbfs/token"), []byte(token)), 0o644))
	opts, err := LoadDefaults(sample)
	must(t, err)
	if opts["token-file"] != token || opts["fsync"] != "replicated" || opts["ack"] != "all" {
		t.Fatalf("the sample's defaults: %v", opts)
	}
	must(t, os.WriteFile(sample, []byte("colour: blue\n"), 0o644))
	if _, err := LoadDefaults(sample); !errors.Is(err, ErrBadOption) {
		t.Fatalf("a defaults file with an unknown key: %v", err)
	}
}
