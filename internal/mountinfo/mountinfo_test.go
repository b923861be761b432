package mountinfo

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLookupAndFSPath: the table shows a bind mount, its device and where
// inside the file system it comes from.
func TestLookupAndFSPath(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "with space", "src"), filepath.Join(dir, "dst")
	os.MkdirAll(src, 0o755)
	os.Mkdir(dst, 0o755)
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v (needs root)", err)
	}
	defer unix.Unmount(dst, unix.MNT_DETACH)
	tab, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := tab.At(dst)
	if !ok {
		t.Fatalf("no mount at %s", dst)
	}
	sdev, spath := tab.FSPath(src)
	ddev, dpath := tab.FSPath(filepath.Join(dst, "x"))
	if sdev != m.Dev || ddev != m.Dev || dpath != filepath.Join(spath, "x") {
		t.Fatalf("bind mount of %s (%s %s) at %s: %s %s", src, sdev, spath, dst, ddev, dpath)
	}
	if m.FSType == "" {
		t.Fatal("no file system type")
	}
}

// TestWatchSeesMountsComeAndGo: Next returns once a mount comes and once
// it goes, the table then shows it (source and all) or not, and Stop ends
// a Next that waits.
func TestWatchSeesMountsComeAndGo(t *testing.T) {
	w, err := Watch()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := make(chan error, 1)
	dst := t.TempDir()
	for _, step := range []struct {
		what string
		do   func() error
		want bool
	}{
		{"mount", func() error { return unix.Mount("pbfs-test,src", dst, "tmpfs", 0, "") }, true},
		{"unmount", func() error { return unix.Unmount(dst, 0) }, false},
	} {
		go func() { next <- w.Next() }()
		if err := step.do(); err != nil {
			t.Skipf("%s: %v (needs root)", step.what, err)
		}
		select {
		case err := <-next:
			if err != nil {
				t.Fatalf("after the %s: %v", step.what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no change seen after the %s", step.what)
		}
		tab, err := Read()
		if err != nil {
			t.Fatal(err)
		}
		m, ok := tab.At(dst)
		if ok != step.want || ok && (m.Source != "pbfs-test,src" || !tab.WithDev(m.Dev)) {
			t.Fatalf("after the %s: mount at %s %v (%+v)", step.what, dst, ok, m)
		}
	}
	go func() { next <- w.Next() }()
	w.Stop()
	select {
	case err := <-next:
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("Next after Stop: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not end Next")
	}
}
