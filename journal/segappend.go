package journal

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The batch log's append path: one pwritev per group of batches, synced
// or left to write-back.

// writebackEvery is how many bytes lazy appends leave dirty before write-back
// of them is started.
const writebackEvery = 1 << 20

// maxIov bounds the buffers of one pwritev (the kernel's IOV_MAX is 1024).
const maxIov = 1024

// append writes bodies as seqs first, first+1, ... at the end of the log;
// with sync they are durable before they can be read. A failed append
// leaves the log as it was.
func (l *batchLog) append(first uint64, bodies [][]byte, sync bool) error {
	if l.ro {
		return errors.New("append to a read-only journal")
	}
	if n := l.next(); n != 0 && first != n {
		return fmt.Errorf("append batch %d: the log continues at %d: %w", first, n, ErrChain)
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	need := int64(0)
	for _, b := range bodies {
		need += recHdrSize + int64(len(b))
	}
	if l.w == nil || (l.wseg.end > 0 && l.wseg.end+need > l.wlimit) {
		if err := l.rotate(first); err != nil {
			return err
		}
	}
	end := l.wseg.end
	locs := make([]recLoc, 0, len(bodies))
	off := end
	for _, b := range bodies {
		locs = append(locs, recLoc{seg: l.wseg, off: off + recHdrSize, n: uint32(len(b))})
		off += recHdrSize + int64(len(b))
	}
	fileEnd := off // where the file may now end
	direct := sync && l.direct.usable(need) && l.direct.append(l.w, end, first, bodies)
	if direct {
		fileEnd = (off + directBlock - 1) &^ (directBlock - 1) // whole blocks
	}
	if !direct {
		if err := l.writeBuffered(end, first, bodies); err != nil {
			return fmt.Errorf("append batch %d: %w", first, err)
		}
	}
	if sync {
		if err := l.syncLocked(); err != nil {
			return fmt.Errorf("append batch %d: %w", first, err)
		}
	} else if off-l.kicked >= writebackEvery {
		// Start write-back of what lazy appends left dirty, without
		// waiting for it: the next sync, or the rotation's, then finds
		// little to do instead of stalling on many MiB at once.
		unix.SyncFileRange(int(l.w.Fd()), l.kicked, off-l.kicked, unix.SYNC_FILE_RANGE_WRITE)
		l.kicked = off
	}
	l.mu.Lock()
	if len(l.index) == 0 {
		l.first = first
	}
	l.index = append(l.index, locs...)
	for i, b := range bodies {
		l.hot.add(first+uint64(i), b)
	}
	l.wseg.end, l.wseg.n = off, l.wseg.n+len(locs)
	l.wcap = max(l.wcap, fileEnd)
	l.mu.Unlock()
	if l.wseg.end > l.segSize/2 {
		l.spare.make(l.segSize)
	}
	return nil
}

// writeBuffered writes the records of bodies, seqs first on, at off of
// the newest segment through the page cache.
func (l *batchLog) writeBuffered(off int64, first uint64, bodies [][]byte) error {
	iov := make([][]byte, 0, min(2*len(bodies), maxIov))
	for i, b := range bodies {
		iov = append(iov, recordHeader(first+uint64(i), b), b)
		off += recHdrSize + int64(len(b))
		if len(iov) == cap(iov) || i == len(bodies)-1 {
			if err := pwriteAll(l.w, iov, off-sumLen(iov)); err != nil {
				return err
			}
			iov = iov[:0]
		}
	}
	return nil
}

func sumLen(iov [][]byte) int64 {
	n := int64(0)
	for _, b := range iov {
		n += int64(len(b))
	}
	return n
}

// pwriteAll writes iov at off, finishing short writes.
func pwriteAll(f *os.File, iov [][]byte, off int64) error {
	for len(iov) > 0 {
		n, err := unix.Pwritev(int(f.Fd()), iov, off)
		if err != nil {
			return err
		}
		off += int64(n)
		for n > 0 && len(iov) > 0 {
			if n >= len(iov[0]) {
				n -= len(iov[0])
				iov = iov[1:]
			} else {
				iov[0] = iov[0][n:]
				n = 0
			}
		}
	}
	return nil
}
