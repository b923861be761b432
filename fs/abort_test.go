package fs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/capture"
)

// TestAbortReachesOnlyItsOwnConnection: an abort that comes after the
// kernel ended the connection, but before the request loop read that end
// (the window Abort's own check cannot close), reaches nothing. The
// connection's id goes to the next FUSE mount at once; an abort written to
// the id's control file ended that stranger's mount, another volume's on a
// machine running several.
func TestAbortReachesOnlyItsOwnConnection(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	gone := mountEmpty(t)
	id := gone.connID()
	if gone.abortFile == nil {
		t.Fatalf("the abort file of connection %s was not opened: %v", id, gone.abortErr)
	}
	// closeAbort closes the file once the loop has read the end; the
	// race is an abort before that, so the test keeps a descriptor of its
	// own, opened as openAbort's was, while the connection lives.
	var kept *os.File
	if err := atControl(id, func(abort string) (err error) {
		kept, err = os.OpenFile(abort, os.O_WRONLY, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	if err := unix.Unmount(gone.dir, 0); err != nil {
		t.Fatal(err)
	}
	<-gone.Done()
	reused := false
	for i := 0; i < 4 && !reused; i++ { // one of them likely takes the freed id
		live := mountEmpty(t)
		reused = live.connID() == id
		gone.abortMu.Lock()
		gone.abortFile, gone.abortDone = kept, false // as if the loop had not read the end yet
		gone.abortMu.Unlock()
		if err := gone.abortConn(); err != nil {
			t.Fatalf("abort of an ended connection: %v", err)
		}
		p := filepath.Join(live.dir, "f")
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatalf("mount %d (connection %s, the ended one was %s), after the abort: %v", i, live.connID(), id, err)
		}
		unix.Close(fd)
	}
	if !reused {
		t.Logf("no new mount took connection id %s (another test's did): only the plain case was checked", id)
	}
}

// mountEmpty mounts an empty backing directory and unmounts it at the
// test's end.
func mountEmpty(t *testing.T) *Server {
	t.Helper()
	return mountOver(t, t.TempDir(), t.TempDir())
}

// mountOver serves backing at mnt from this process, with capture on,
// until the test's end.
func mountOver(t *testing.T, backing, mnt string) *Server {
	t.Helper()
	root, err := unix.Open(backing, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfs, err := capture.New(root, capture.Options{Capture: true, MaxBatchBytes: 1 << 20, Metrics: capture.NewMetrics(nil)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Mount(mnt, cfs, Options{})
	if err != nil {
		cfs.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-srv.Done():
		default:
			srv.Unmount()
			<-srv.Done()
		}
		cfs.Close()
	})
	return srv
}
