package fs

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"
)

// TestSlowRequestDoesNotStallOthers holds one caller's READ in the daemon
// and checks that another caller is still served: the request loop must
// bring in another reader while its only one is busy, or every caller of
// the mount waits behind one slow request.
func TestSlowRequestDoesNotStallOthers(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	backing, mnt := t.TempDir(), t.TempDir()
	want := bytes.Repeat([]byte("slow"), 1024)
	if err := os.WriteFile(filepath.Join(backing, "slow"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(backing, "fast"), []byte("fast"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The first READ waits in the daemon until released (or 5 s pass).
	const hold = 5 * time.Second
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	serveHook = func(req fuse.Request) {
		if _, ok := req.(*fuse.ReadRequest); ok && first.CompareAndSwap(false, true) {
			close(entered)
			select {
			case <-release:
			case <-time.After(hold):
			}
		}
	}
	t.Cleanup(func() { serveHook = nil })
	mountOver(t, backing, mnt)

	// The mount is served by this process: read it with plain syscalls.
	// os.ReadFile would register the file with the runtime's poller, whose
	// epoll_ctl asks the mount (FUSE POLL) without telling the scheduler,
	// and a garbage collection waiting for that thread deadlocks the test.
	slow := make(chan error, 1)
	go func() {
		got, err := readFile(filepath.Join(mnt, "slow"))
		if err == nil && !bytes.Equal(got, want) {
			err = os.ErrInvalid
		}
		slow <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the read never reached the daemon")
	}
	start := time.Now()
	got, err := readFile(filepath.Join(mnt, "fast"))
	took := time.Since(start)
	close(release)
	if err != nil || string(got) != "fast" {
		t.Fatalf("reading another file while one read is held: %q, %v", got, err)
	}
	if took > time.Second {
		t.Errorf("another caller waited %v behind a held request (held for up to %v)", took, hold)
	}
	if err := <-slow; err != nil {
		t.Fatalf("the held read: %v", err)
	}
}

// readFile reads a small file with open(2) and read(2) only.
func readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

// A read that says the connection is over ends the reader; an aborted
// connection (ECONNABORTED) was taken for a bad message, logged as an
// error and read again.
func TestConnectionEnded(t *testing.T) {
	for err, want := range map[error]bool{
		io.EOF: true, syscall.ENODEV: true, syscall.EBADF: true, syscall.ECONNABORTED: true,
		syscall.EINTR: false, syscall.EAGAIN: false, syscall.ENOENT: false, errors.New("fuse: message too short"): false,
	} {
		if got := connectionEnded(err); got != want {
			t.Errorf("connectionEnded(%v) = %v, want %v", err, got, want)
		}
	}
}
