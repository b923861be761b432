package capture

import (
	"math"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// Write writes data at off (at the end of file for O_APPEND handles) and
// records it. The write and the record happen under the file's lock, so
// the recorded order of overlapping writes is the order they landed in.
//
// With kill set (the kernel asks when the writer lacks CAP_FSETID; kill is
// the writer) the write also clears setuid, setgid and file capabilities,
// as a local filesystem would; pbfs writes as root, so the backing file
// never does.
func (f *FS) Write(h *Handle, off int64, data []byte, kill *Caller) (int, error) {
	return f.WriteAs(h, off, data, kill, h.append)
}

// WriteAs is Write with the open file's append mode as of this write
// (appending), which the FUSE binding takes from the request: fcntl
// F_SETFL may have set or cleared O_APPEND since the open, and the
// kernel's write-back of cached pages is never an append. The mode the
// file had when opened used to decide, so a write after F_SETFL cleared
// O_APPEND still went to the end of the file.
func (f *FS) WriteAs(h *Handle, off int64, data []byte, kill *Caller, appending bool) (int, error) {
	n := h.node
	if n.localNode() {
		f.begin() // nothing for the journal to take
	} else if err := f.beginGrow("write"); err != nil {
		return 0, err
	}
	defer f.end()
	n.mu.Lock()
	defer n.mu.Unlock()
	if kill != nil {
		changed, err := f.killPriv(n, h.fd, kill)
		if err != nil {
			return 0, err
		}
		if changed {
			h.cleared.Store(true)
		}
	}
	if appending {
		// The kernel's idea of the end of file can be stale (the file may
		// have grown through another name); the backing file's is not.
		var st unix.Stat_t
		if err := unix.Fstat(h.fd, &st); err != nil {
			return 0, f.fail("write", err)
		}
		off = st.Size
	}
	if off < 0 {
		return 0, unix.EINVAL
	}
	if err := checkExtent(uint64(off), uint64(len(data))); err != nil {
		return 0, err
	}
	if !f.captures(n) {
		k, err := pwriteFull(h.fd, data, off)
		return k, f.fail("write", err)
	}
	var old []byte
	if f.opts.WriteDiff {
		old = f.oldBytes(h.fd, off, len(data))
	}
	k, err := pwriteFull(h.fd, data, off)
	if k > 0 {
		log := f.dataLog(n)
		before := log.Footprint()
		if old != nil {
			recordDiff(log, uint64(off), data[:k], old)
			putBuf(old)
		} else {
			log.Write(uint64(off), data[:k])
		}
		f.grew(log.Footprint() - before)
		f.mtimeAtSeal(n)
		f.m.op(journal.KindWrite)
		f.m.WriteBytes.Add(float64(k))
		f.written.Add(int64(k))
	} else if old != nil {
		putBuf(old)
	}
	if err != nil {
		return k, f.fail("write", err)
	}
	return k, nil
}

// writeChunk bounds each backing pwrite. ext4 sizes the page-cache folio
// it allocates for a write by the write's length, and every later small
// overwrite or fdatasync inside a large folio walks all of its buffer
// heads: after 1 MiB writes, a 4 KiB overwrite of the backing file cost
// about 24 us of pwrite and 35 us more fdatasync, against 3-6 us with
// 64 KiB folios (docs/PERFORMANCE.md). The kernel sends writes of up to
// 1 MiB, so a large write becomes a few aligned backing writes, all inside
// the one critical section that records it.
const writeChunk = 64 << 10

// pwriteFull writes all of data or fails: the kernel takes a short FUSE
// write for EIO, so a backing write cut short by ENOSPC must report
// ENOSPC. Bytes written before the error stay written, and recorded.
func pwriteFull(fd int, data []byte, off int64) (int, error) {
	done := 0
	for done < len(data) {
		at := off + int64(done)
		end := min(len(data), done+int(writeChunk-at%writeChunk))
		k, err := unix.Pwrite(fd, data[done:end], at)
		if k > 0 {
			done += k
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if k == 0 {
			return done, unix.ENOSPC
		}
	}
	return done, nil
}

// truncateLog records a size change; the caller holds n.mu and sealMu.
func (f *FS) truncateLog(n *Node, size uint64) {
	log := f.dataLog(n)
	before := log.Footprint()
	log.Truncate(size)
	f.grew(log.Footprint() - before)
	f.m.op(journal.KindTruncate)
}

func (f *FS) metaLog(n *Node, op journal.Op) {
	log := f.dataLog(n)
	before := log.Footprint()
	log.Meta(op)
	f.grew(log.Footprint() - before)
	f.m.op(op.Kind)
}

// Fallocate runs fallocate(2) on an open file and records it. Unless c
// (the caller; nil: none to judge) holds CAP_FSETID, it first clears
// setuid, setgid and capabilities as a local file system's fallocate
// does; the kernel leaves that to a FUSE server and sends no flag for it.
func (f *FS) Fallocate(h *Handle, mode uint32, off, length uint64, c *Caller) error {
	if err := checkFallocate(mode, off, length); err != nil {
		return err
	}
	n := h.node
	if mode&unix.FALLOC_FL_PUNCH_HOLE != 0 || n.localNode() {
		f.begin()
	} else if err := f.beginGrow("fallocate"); err != nil {
		return err
	}
	defer f.end()
	n.mu.Lock()
	defer n.mu.Unlock()
	if c != nil {
		changed, err := f.killPrivAt(n, h.fd, "", c, killFallocate)
		if err != nil {
			return err
		}
		if changed {
			h.cleared.Store(true)
		}
	}
	if err := unix.Fallocate(h.fd, mode, int64(off), int64(length)); err != nil {
		return f.fail("fallocate", err)
	}
	if f.captures(n) {
		f.dataLog(n).Fallocate(mode, off, length)
		f.m.op(journal.KindFallocate)
		f.mtimeAtSeal(n)
	}
	return nil
}

func (f *FS) truncate(fd int, p string, size uint64) error {
	if fd >= 0 {
		return unix.Ftruncate(fd, int64(size))
	}
	nfd, err := unix.Openat(f.root, p, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	return unix.Ftruncate(nfd, int64(size))
}

func (f *FS) fdPath(fd int) string { return "/proc/self/fd/" + itoa(fd) }

func timeArg(t *time.Time, now bool, at time.Time) int64 {
	switch {
	case now:
		return at.UnixNano()
	case t != nil:
		return clampNano(t.Unix(), int64(t.Nanosecond()))
	}
	return journal.OmitTime
}

// The journal records times as nanoseconds since the epoch (an int64:
// 1677-09-21 to 2262-04-11). A time set outside that range is clamped to
// it before it reaches the backing file, as a file system clamps times to
// its own range (ext4's is 1901 to 2446), so the primary and its backups
// agree; UnixNano used to wrap it, and a file touched to 2500 read 1915.
const (
	minSec = math.MinInt64/1_000_000_000 + 1 // whole seconds inside the range
	maxSec = math.MaxInt64/1_000_000_000 - 1
)

// clampNano is sec.nsec in nanoseconds, clamped to the int64 range.
func clampNano(sec, nsec int64) int64 {
	switch {
	case sec < minSec:
		return math.MinInt64
	case sec > maxSec:
		return math.MaxInt64
	}
	return sec*1e9 + nsec
}

// timespecNano is ts in nanoseconds, clamped as clampNano does.
func timespecNano(ts unix.Timespec) int64 { return clampNano(ts.Sec, ts.Nsec) }

func timespec(ns int64) unix.Timespec {
	if ns == journal.OmitTime {
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.NsecToTimespec(ns)
}

func itoa(i int) string {
	var b [20]byte
	k := len(b)
	for {
		k--
		b[k] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[k:])
		}
	}
}
