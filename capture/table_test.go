package capture_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/capture"
	"github.com/pbfs/pbfs/internal/fstest"
)

// A file deleted while the kernel still holds its node frees its inode,
// and the backing file system gives the number to the next new file
// (ext4 does at once). The new file is another file: it must start with
// none of the dead one's state. It took the dead node over before, with
// its pending ops.
func TestNewFileOnAReusedInode(t *testing.T) {
	k, vol, start := seeded(t, capture.Options{Capture: true})
	s := &sealer{fs: k.fs}
	root := k.fs.Root()
	for round := 0; round < 20; round++ {
		x, h, _, err := k.fs.Create(root, "x", unix.O_RDWR, 0o644, k.caller, false)
		if err != nil {
			t.Fatal(err)
		}
		k.fs.Write(h, 0, []byte("the dead file's bytes, longer than the new one's"), nil)
		k.fs.Setxattr(x, "user.dead", []byte("dead"), 0, false)
		k.fs.Release(h)
		var st unix.Stat_t
		unix.Stat(filepath.Join(vol, "x"), &st)
		if err := k.fs.Remove(root, "x", false); err != nil {
			t.Fatal(err)
		}
		_, h, _, err = k.fs.Create(root, "y", unix.O_RDWR, 0o600, k.caller, false)
		if err != nil {
			t.Fatal(err)
		}
		k.fs.Write(h, 0, []byte("new"), nil)
		k.fs.Release(h)
		var st2 unix.Stat_t
		unix.Stat(filepath.Join(vol, "y"), &st2)
		if round%2 == 1 {
			s.seal(t)
		}
		if st.Ino != st2.Ino {
			t.Logf("round %d: inode %d not reused (%d)", round, st.Ino, st2.Ino)
		}
		if err := k.fs.Remove(root, "y", false); err != nil {
			t.Fatal(err)
		}
		if round%3 == 0 {
			s.seal(t)
		}
	}
	_, h, _, err := k.fs.Create(root, "z", unix.O_RDWR, 0o644, k.caller, false)
	if err != nil {
		t.Fatal(err)
	}
	k.fs.Write(h, 0, []byte("last"), nil)
	k.fs.Release(h)
	s.seal(t)
	s.replay(t, start)
	fstest.RequireEqual(t, fstest.Snapshot(t, vol), fstest.Snapshot(t, start), "replay vs volume")
}

// The kernel may forget a directory right after a change to its entries,
// before the batch seals: the seal must still read its new mtime. The
// node was evicted with the forget before, and the backup kept the time
// of its own apply.
func TestForgottenDirectoryKeepsItsTime(t *testing.T) {
	k, vol, start := seeded(t, capture.Options{Capture: true})
	s := &sealer{fs: k.fs}
	root := k.fs.Root()
	for i, change := range []func(dir *capture.Node) error{
		func(dir *capture.Node) error { return k.fs.Remove(dir, "f", false) },
		func(dir *capture.Node) error { _, _, err := k.fs.Mkdir(dir, "sub", 0o755, k.caller); return err },
		func(dir *capture.Node) error { return k.fs.Rename(dir, "f", dir, "moved", 0) },
	} {
		name := fmt.Sprint("forgot", i)
		dir, _, err := k.fs.Mkdir(root, name, 0o755, k.caller)
		if err != nil {
			t.Fatal(err)
		}
		_, h, _, err := k.fs.Create(dir, "f", unix.O_RDWR, 0o644, k.caller, false)
		if err != nil {
			t.Fatal(err)
		}
		k.fs.Release(h)
		s.seal(t)
		time.Sleep(10 * time.Millisecond) // a later mtime
		if err := change(dir); err != nil {
			t.Fatal(err)
		}
		k.fs.Forget(dir, 1) // the kernel's only reference
		s.seal(t)
	}
	time.Sleep(10 * time.Millisecond) // the replay's own times differ
	s.replay(t, start)
	fstest.RequireEqual(t, fstest.Snapshot(t, vol), fstest.Snapshot(t, start), "replay vs volume")
}

// Paths close to the volume's limit (4,095 bytes) take extended
// attributes and ACL checks like any other, though the /proc name of the
// root fd pushes them past the kernel's PATH_MAX: a 4,085-byte directory
// could not be made (its ACL check failed) nor a file's xattr set, and a
// resync left such a file's xattrs behind without a word.
func TestDeepPaths(t *testing.T) {
	k, vol, start := seeded(t, capture.Options{Capture: true})
	s := &sealer{fs: k.fs}
	dir := k.fs.Root()
	seg := strings.Repeat("d", 250)
	var rel []string
	for i := 0; i < 16; i++ {
		n, _, err := k.fs.Mkdir(dir, seg, 0o755, k.caller)
		if err != nil {
			t.Fatalf("mkdir at depth %d: %v", i, err)
		}
		dir, rel = n, append(rel, seg)
	}
	name := strings.Repeat("f", 4085-16*251) // the whole path: 4,085 bytes
	if _, _, err := k.fs.Mkdir(dir, "D"+name[1:], 0o755, k.caller); err != nil {
		t.Fatalf("mkdir of a 4,085-byte path: %v", err)
	}
	f, h, _, err := k.fs.Create(dir, name, unix.O_RDWR, 0o644, k.caller, false)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	k.fs.Release(h)
	if err := k.fs.Setxattr(f, "user.deep", []byte("value"), 0, false); err != nil {
		t.Fatalf("setxattr on a 4,085-byte path: %v", err)
	}
	buf := make([]byte, 16)
	if n, err := k.fs.Getxattr(f, "user.deep", buf); err != nil || string(buf[:n]) != "value" {
		t.Fatalf("getxattr: %q %v", buf[:max(n, 0)], err)
	}
	s.seal(t)
	s.replay(t, start)
	// The trees' absolute paths are too long for a path walk: compare the
	// deep entries through their directory.
	for _, root := range []string{vol, start} {
		d, err := unix.Open(filepath.Join(append([]string{root}, rel[:8]...)...), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(d)
		deep, err := unix.Openat(d, filepath.Join(rel[8:]...), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatalf("%s: %v", root, err)
		}
		defer unix.Close(deep)
		var st unix.Stat_t
		if err := unix.Fstatat(deep, "D"+name[1:], &st, 0); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			t.Fatalf("%s: the deep directory: %v", root, err)
		}
		n, err := unix.Getxattr(fmt.Sprintf("/proc/self/fd/%d/%s", deep, name), "user.deep", buf)
		if err != nil || string(buf[:n]) != "value" {
			t.Fatalf("%s: the deep file's xattr: %q %v", root, buf[:max(n, 0)], err)
		}
	}
}

// A file with a second name the table never learned of (the seed's
// prelinks, made before the mount) is written through the name it knows,
// closed, and that name then goes, removed or renamed over, in the same
// batch. The writes changed the surviving name, so the batch must carry
// them under it. The node lost its inode number with its last known name
// before: findName bound the surviving name to a new node, and the seal
// dropped the writes with the old one (found by TestFrozenIsExact).
func TestWritesOutliveTheLastKnownName(t *testing.T) {
	k, vol, start := seeded(t, capture.Options{Capture: true})
	s := &sealer{fs: k.fs}
	write := func(p, data string) {
		t.Helper()
		h, err := k.open(p, unix.O_RDWR, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.fs.Write(h, 3, []byte(data), nil); err != nil {
			t.Fatal(err)
		}
		k.fs.Release(h) // no handle left when the name goes
	}
	write("d1/prelink", "WRITTEN-BEFORE-UNLINK")
	d1, _, err := k.parent("d1/prelink")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.fs.Remove(d1, "prelink", false); err != nil {
		t.Fatal(err)
	}
	write("d0/e/prelink", "WRITTEN-BEFORE-RENAME-OVER")
	e, _, err := k.parent("d0/e/prelink")
	if err != nil {
		t.Fatal(err)
	}
	_, h, _, err := k.fs.Create(e, "new", unix.O_RDWR, 0o644, k.caller, false)
	if err != nil {
		t.Fatal(err)
	}
	k.fs.Release(h)
	if err := k.fs.Rename(e, "new", e, "prelink", 0); err != nil {
		t.Fatal(err)
	}
	s.seal(t)
	s.replay(t, start)
	fstest.RequireEqual(t, fstest.Snapshot(t, vol), fstest.Snapshot(t, start), "replay vs volume")
}
