package mount

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// Changes made to the volume while pbfs is not mounted never pass through
// the capture, so the journal, and every backup fed from it, would lack
// them for good. A clean stop therefore fingerprints the volume it leaves
// (every entry's name, inode, type and mode, owner, link count, size, rdev,
// mtime and ctime, hashed in tree order) and the next start compares: a
// different fingerprint means the volume changed behind pbfs's back, and
// every backup is resynced from it before barriers succeed again, as after
// a crash. ctime moves on any change to an inode and cannot be set from
// user space, so an edit that restores the mtime is still seen. Access
// times are left out: reading the volume while unmounted changes nothing.
//
// The walk stats every entry, at stop and at start: about a second per
// few hundred thousand entries.

// fingerprintKey is the journal metadata key of the last clean stop's
// fingerprint.
var fingerprintKey = journal.KeyFingerprint.Name

// stopPrint is the volume's fingerprint taken as a stop begins, while
// the volume is still mounted.
type stopPrint struct {
	sum     []byte
	entries int
	took    time.Duration
	err     error
}

// printBeforeStop fingerprints the volume before it is unmounted. Taken
// after the unmount, as it was, the fingerprint took in what the service
// wrote straight to the directory once the mount was detached (at once,
// or while a lazy unmount waited for the service's open files), and the
// next start found nothing to resync. Taken before, any change after it,
// through the mount or not, leaves the volume differing from it (every
// change moves an inode's ctime), so the next start resyncs.
//
// A mount unmounted from outside is gone before its stop begins: gone is
// when pbfs saw it go. A volume mounted over itself is the bare directory
// from then on, so an entry changed since goneSlack before that may have
// been changed straight in it, after the unmount, and is already in the
// print: the stop records no fingerprint, and the next start resyncs. (A
// backing directory mounted elsewhere is not exposed by the unmount.)
func (m *Mount) printBeforeStop(gone time.Time) stopPrint {
	if m.cfg.NoCapture {
		return stopPrint{}
	}
	start := time.Now()
	var p stopPrint
	tp, err := m.fingerprint(m.fs.RootFd())
	p.sum, p.entries, p.err = tp.sum, tp.entries, err
	p.took = time.Since(start)
	if since := gone.Add(-goneSlack); err == nil && !gone.IsZero() && m.overItself && tp.newest >= since.UnixNano() {
		p.err = fmt.Errorf("entries of the volume changed as it was unmounted from outside (since %s), maybe straight in the directory: %w",
			since.Format(time.StampMilli), errChangedAtUnmount)
	}
	return p
}

// goneSlack is how long before pbfs saw its mount go the unmount may have
// happened: the time it takes to notice, and the granularity of ctimes.
const goneSlack = time.Second

// errChangedAtUnmount: see printBeforeStop.
var errChangedAtUnmount = errors.New("the next start resyncs the backups")

// recordOffline stores p at a clean stop.
func (m *Mount) recordOffline(p stopPrint) error {
	if m.cfg.NoCapture {
		return nil
	}
	if p.err != nil {
		m.store.SetMeta(fingerprintKey, nil) // a stale one must not pass
		return p.err
	}
	m.log.Info("volume fingerprinted for the next start", "entries", p.entries, "took", p.took.Round(time.Millisecond))
	return m.store.SetMeta(fingerprintKey, p.sum)
}

// checkOffline compares the volume with the fingerprint of the last clean
// stop, and reports whether it changed since (or cannot be told).
func (m *Mount) checkOffline(rootFd int) (bool, error) {
	want, err := m.store.Meta(fingerprintKey)
	if err != nil {
		return false, err
	}
	if len(want) == 0 {
		// No clean stop recorded one: a new journal (its backups start
		// with a resync anyway) or a journal from before fingerprints.
		return m.store.Last().Seq > 0, nil
	}
	start := time.Now()
	got, err := m.fingerprint(rootFd)
	if err != nil {
		return false, fmt.Errorf("fingerprint the volume: %w", err)
	}
	m.log.Info("volume checked against the last clean stop", "entries", got.entries, "changed", !bytes.Equal(got.sum, want),
		"took", time.Since(start).Round(time.Millisecond))
	return !bytes.Equal(got.sum, want), nil
}

// treePrint is a fingerprint of a tree: the hash, the entries hashed and
// the newest ctime among them (unix ns).
type treePrint struct {
	sum     []byte
	entries int
	newest  int64
}

// fingerprint hashes the volume's tree and the local-only rules in force:
// a start with other rules ships other files, and resyncs (hints.go).
func (m *Mount) fingerprint(rootFd int) (treePrint, error) {
	p, err := fingerprintTree(rootFd)
	if err != nil || m.rulesSum == nil {
		return p, err
	}
	h := sha256.New()
	h.Write(p.sum)
	h.Write(m.rulesSum)
	p.sum = h.Sum(nil)
	return p, nil
}

// fingerprintTree hashes the tree under the directory open as rootFd.
func fingerprintTree(rootFd int) (treePrint, error) {
	h := sha256.New()
	n := 0
	var newest int64
	var rec []byte
	var walk func(dirFd int, path string) error
	walk = func(dirFd int, path string) error {
		names, err := listNames(dirFd)
		if err != nil {
			return fmt.Errorf("list %s: %w", path, err)
		}
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(dirFd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("stat %s/%s: %w", path, name, err)
			}
			n++
			newest = max(newest, st.Ctim.Nano())
			rec = append(rec[:0], path...)
			rec = append(rec, '/')
			rec = append(rec, name...)
			rec = append(rec, 0)
			for _, v := range []uint64{st.Ino, uint64(st.Mode), uint64(st.Uid), uint64(st.Gid), uint64(st.Nlink),
				uint64(st.Size), st.Rdev, uint64(st.Mtim.Nano()), uint64(st.Ctim.Nano())} {
				rec = binary.LittleEndian.AppendUint64(rec, v)
			}
			h.Write(rec)
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
			fd, err := unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open %s/%s: %w", path, name, err)
			}
			err = walk(fd, path+"/"+name)
			unix.Close(fd)
			if err != nil {
				return err
			}
		}
		return nil
	}
	// The root's own attributes count too (its mode, owner, mtime).
	var st unix.Stat_t
	if err := unix.Fstat(rootFd, &st); err != nil {
		return treePrint{}, err
	}
	newest = st.Ctim.Nano()
	for _, v := range []uint64{uint64(st.Mode), uint64(st.Uid), uint64(st.Gid), uint64(st.Mtim.Nano()), uint64(st.Ctim.Nano())} {
		rec = binary.LittleEndian.AppendUint64(rec, v)
	}
	h.Write(rec)
	// Walk through a descriptor of our own: rootFd's offset must not move.
	fd, err := unix.Openat(rootFd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return treePrint{}, err
	}
	defer unix.Close(fd)
	if err := walk(fd, "."); err != nil {
		return treePrint{entries: n}, err
	}
	return treePrint{sum: h.Sum(nil), entries: n, newest: newest}, nil
}

// listNames returns the names in the directory open as fd, sorted,
// without "." and "..".
func listNames(fd int) ([]string, error) {
	var names []string
	buf := make([]byte, 32<<10)
	for {
		k, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if k <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:k], -1, names)
	}
	sort.Strings(names)
	return names, nil
}
