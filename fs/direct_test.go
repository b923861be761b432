package fs_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// TestAsyncDirectWriteThenBufferedRead: a buffered read after an
// asynchronous O_DIRECT write returns what the write wrote, while other
// processes read the file through the page cache all along (xfstests
// generic/451). The kernel drops a file's cached pages before a direct
// write, but for an asynchronous one not again after it, so pages that
// a concurrent reader cached in between, holding the old data, stayed
// (opens keep the page cache): the check read the old pattern.
func TestAsyncDirectWriteThenBufferedRead(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, nil)
		const size = 640 << 10
		p := filepath.Join(e.Vol, "cycle")
		must(t, os.WriteFile(p, bytes.Repeat([]byte{0xaa}, size), 0o644))
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, size)
				for !stop.Load() {
					if f, err := os.Open(p); err == nil {
						f.ReadAt(buf, 0)
						f.Close()
					}
				}
			}()
		}
		defer func() { stop.Store(true); wg.Wait() }()
		buf := alignedBuf(size)
		got := make([]byte, size)
		for round := range 60 {
			fill := []byte{0x55, 0xaa}[round%2]
			for i := range buf {
				buf[i] = fill
			}
			must(t, aioWrite(p, buf))
			f, err := os.Open(p)
			must(t, err)
			_, err = f.ReadAt(got, 0)
			f.Close()
			must(t, err)
			for i, b := range got {
				if b != fill {
					t.Fatalf("round %d: a buffered read after the direct write finds %#x at offset %#x, want %#x throughout", round, b, i, fill)
				}
			}
		}
		stop.Store(true)
		wg.Wait()
		e.CheckReplay()
	})
}

// alignedBuf returns n bytes aligned for O_DIRECT.
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := int(4096 - uintptr(unsafe.Pointer(&b[0]))%4096)
	return b[off%4096 : off%4096+n]
}

// iocb and ioEvent are the kernel's struct iocb and struct io_event.
type iocb struct {
	data     uint64
	key      uint32
	rwFlags  uint32
	opcode   uint16
	reqprio  int16
	fildes   uint32
	buf      uint64
	nbytes   uint64
	offset   int64
	reserved uint64
	flags    uint32
	resfd    uint32
}

type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

// aioWrite writes buf at offset 0 of the file at p, opened O_DIRECT,
// with io_submit(2) in 64 KiB pieces all in flight at once, as
// aio-dio-cycle-write does, and waits for every piece.
func aioWrite(p string, buf []byte) error {
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	const piece = 64 << 10
	k := len(buf) / piece
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(k), uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return fmt.Errorf("io_setup: %w", e)
	}
	defer unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
	cbs := make([]iocb, k)
	ptrs := make([]*iocb, k)
	for i := range cbs {
		cbs[i] = iocb{opcode: 1 /* IOCB_CMD_PWRITE */, fildes: uint32(fd), nbytes: piece, offset: int64(i * piece),
			buf: uint64(uintptr(unsafe.Pointer(&buf[i*piece])))}
		ptrs[i] = &cbs[i]
	}
	if n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, ctx, uintptr(k), uintptr(unsafe.Pointer(&ptrs[0]))); e != 0 || int(n) != k {
		return fmt.Errorf("io_submit: %d of %d: %v", n, k, e)
	}
	evs := make([]ioEvent, k)
	for done := 0; done < k; {
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, ctx, 1, uintptr(k-done), uintptr(unsafe.Pointer(&evs[0])), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return fmt.Errorf("io_getevents: %w", e)
		}
		for _, ev := range evs[:n] {
			if ev.res != piece {
				return fmt.Errorf("aio write: %d", ev.res)
			}
		}
		done += int(n)
	}
	return nil
}
