package journal

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A synced append (a backup's, which acks once it returns) goes to the
// newest segment through a second descriptor opened with O_DIRECT: the
// records are laid after the bytes already in the segment's last block,
// in block-aligned memory, and written as whole blocks, then
// fdatasync'd. The page cache's write-back of dirty pages, which the
// fdatasync of a buffered append waits for, is skipped: on this
// project's 2-vCPU test machine a backup spent 12-34 % less CPU per
// 256 KiB batch, and the same per 4-16 KiB batch, whose cost there is
// the device's round trips (docs/PERFORMANCE.md). What lands on the disk
// is byte for byte what a buffered append writes, and the bytes written
// again in front of the records are the ones the block already holds,
// so a torn write leaves no more damage than a buffered one. Lazy
// appends (a primary's) stay buffered: their write-back is what the page
// cache is for.
//
// Where O_DIRECT is refused (a file system without it, an alignment it
// does not take) the log falls back to buffered appends for good; any
// other failure of the direct path (no descriptor left, an I/O error)
// has that one append written buffered, which reports a real error
// itself. A primary, whose appends are lazy, never opens the descriptor.

// directBlock is the alignment of a direct write's memory, offset and
// length: a page, which covers every logical block size in use.
const directBlock = 4096

// directMax bounds the records one direct append takes; larger appends
// are buffered, where the copy into the page cache costs the same.
const directMax = 1 << 20

// directTail is the newest segment's O_DIRECT descriptor and a copy of
// its last block. Its methods run under the log's wmu.
type directTail struct {
	path    string // the newest segment; "" before the log has one
	fd      int    // path opened O_DIRECT at its first synced append; -1: not yet
	off     int64  // the file offset of buf[0], block-aligned
	n       int    // bytes of buf that hold the segment's records; -1: unknown
	buf     []byte // block-aligned, directMax+2*directBlock long; nil until used
	refused bool   // the file system refused O_DIRECT: buffered from now on
	writes  atomic.Uint64
}

// openDirect opens a segment for direct writes (a variable for tests).
var openDirect = func(path string) (int, error) {
	return unix.Open(path, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
}

func newDirectTail() *directTail { return &directTail{fd: -1, n: -1} }

// open makes path, whose records end at end, the segment direct appends
// go to.
func (d *directTail) open(path string, end int64) {
	if d == nil {
		return
	}
	d.close()
	d.path, d.off, d.n = path, end&^(directBlock-1), -1
	if end == d.off {
		d.n = 0 // nothing in the block yet: no need to read it
	}
}

func (d *directTail) close() {
	if d != nil && d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// usable reports whether an append of need bytes can be written direct.
func (d *directTail) usable(need int64) bool {
	return d != nil && !d.refused && d.path != "" && need <= directMax
}

// refusal reports whether err says the file system does not take
// O_DIRECT (or this write's alignment) at all.
func refusal(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP)
}

// append writes the records of bodies, seqs first on, at end of the
// segment w, as whole blocks through the direct descriptor. It reports
// false when it could not; the caller then writes them buffered, over
// whatever a failed direct write left.
func (d *directTail) append(w *os.File, end int64, first uint64, bodies [][]byte) bool {
	if d.fd < 0 {
		fd, err := openDirect(d.path)
		if err != nil {
			d.refused = refusal(err)
			return false
		}
		d.fd = fd
	}
	if d.buf == nil {
		d.buf = alignedBlocks(directMax + 2*directBlock)
	}
	if d.n < 0 || d.off+int64(d.n) != end { // a buffered or failed append came between
		d.off, d.n = end&^(directBlock-1), int(end-end&^(directBlock-1))
		if _, err := w.ReadAt(d.buf[:d.n], d.off); err != nil {
			d.n = -1
			return false
		}
	}
	p := d.n
	for i, b := range bodies {
		p += copy(d.buf[p:], recordHeader(first+uint64(i), b))
		p += copy(d.buf[p:], b)
	}
	size := (p + directBlock - 1) &^ (directBlock - 1)
	clear(d.buf[p:size])
	if err := d.pwrite(size); err != nil {
		d.n = -1 // what the block holds now is read back next time
		if refusal(err) {
			d.refused = true
			d.close()
		}
		return false
	}
	d.writes.Add(1)
	last := p &^ (directBlock - 1)
	d.n = copy(d.buf, d.buf[last:p])
	d.off += int64(last)
	return true
}

// pwrite writes buf[:size] at off, finishing short writes.
func (d *directTail) pwrite(size int) error {
	for done := 0; done < size; {
		n, err := unix.Pwrite(d.fd, d.buf[done:size], d.off+int64(done))
		if err != nil {
			return err
		}
		if n <= 0 {
			return io.ErrShortWrite
		}
		done += n
	}
	return nil
}

// alignedBlocks returns n bytes of memory that start on a block boundary.
func alignedBlocks(n int) []byte {
	b := make([]byte, n+directBlock)
	skip := int(-uintptr(unsafe.Pointer(&b[0])) & (directBlock - 1))
	return b[skip : skip+n : skip+n]
}
