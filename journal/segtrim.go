package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// trim drops the batches below seq from the log and removes the segments
// that hold none of the rest (the newest segment always stays), keeping
// one as the spare. It returns how many batches it dropped. A crash may
// bring back batches of a segment that still held newer ones; the next
// trim drops them again.
func (l *batchLog) trim(below uint64) int {
	l.mu.Lock()
	if len(l.index) == 0 || below <= l.first {
		l.mu.Unlock()
		return 0
	}
	k := min(below-l.first, uint64(len(l.index)))
	l.index = append([]recLoc(nil), l.index[k:]...)
	l.first += k
	var gone []*segFile
	for len(l.segs) > 1 && l.segs[0].first+uint64(l.segs[0].n) <= l.first {
		gone = append(gone, l.segs[0])
		l.segs = l.segs[1:]
	}
	l.mu.Unlock()
	for _, seg := range gone {
		if !l.spare.recycle(seg.path) {
			if err := os.Remove(seg.path); err != nil {
				l.log.Warn("journal: remove a trimmed segment", "path", seg.path, "err", err)
			}
		}
	}
	return int(k)
}

// close stops the spare's filling and closes the newest segment.
func (l *batchLog) close() {
	l.spare.close()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closeWriter()
}

// closeWriter closes the newest segment; the caller holds wmu and mu.
func (l *batchLog) closeWriter() {
	l.direct.close()
	if l.w != nil {
		l.w.Close()
		l.w, l.wseg = nil, nil
	}
}

// replace replaces the whole log with what fill puts (rewriteLog); reads
// wait for it. If the rewrite fails the log stays as it was.
func (l *batchLog) replace(fill func(put func(seq uint64, body []byte) error) error) error {
	l.spare.close()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hot.reset()
	l.closeWriter()
	err := rewriteLog(l.dir, l.log, fill)
	nl, oerr := openBatchLog(l.dir, false, l.log, l.room)
	if oerr != nil {
		l.segs, l.index = nil, nil
		return errors.Join(err, fmt.Errorf("reopen batch log: %w", oerr))
	}
	l.segs, l.index, l.first, l.w, l.wseg, l.wcap, l.wlimit, l.dirDirty, l.spare, l.direct = nl.segs, nl.index, nl.first, nl.w, nl.wseg, nl.wcap, nl.wlimit, false, nl.spare, nl.direct
	return err
}

// rewriteLog replaces the log in dir with the batches fill passes to put,
// in order. They are written to a new directory that is then swapped in
// whole, so a crash leaves the old log or the new one (recoverSwap).
func rewriteLog(dir string, log *slog.Logger, fill func(put func(seq uint64, body []byte) error) error) error {
	tmp := dir + ".new"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("rewrite batch log: %w", err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("rewrite batch log: %w", err)
	}
	nl := &batchLog{dir: tmp, log: log, segSize: segmentSizeFor(fsSize(tmp)), spare: newSpare(tmp, log, nil)}
	err := fill(func(seq uint64, body []byte) error { return nl.append(seq, [][]byte{body}, false) })
	if err == nil {
		err = nl.sync() // rotations synced the segments before the newest
	}
	nl.close()
	if err == nil {
		err = syncDir(tmp)
	}
	if err == nil {
		err = swapDir(dir, tmp)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("rewrite batch log: %w", err)
	}
	return nil
}

// swapDir puts tmp in dir's place.
func swapDir(dir, tmp string) error {
	old := dir + ".old"
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// recoverSwap finishes a rewrite a crash interrupted between its two
// renames (the old log set aside, the new one complete), and removes
// what an unfinished one left.
func recoverSwap(dir string) error {
	tmp, old := dir+".new", dir+".old"
	_, errDir := os.Stat(dir)
	_, errOld := os.Stat(old)
	if errors.Is(errDir, os.ErrNotExist) && errOld == nil {
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("recover batch log: %w", err)
		}
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return fmt.Errorf("recover batch log: %w", err)
		}
	}
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("recover batch log: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("recover batch log: %w", err)
	}
	return nil
}
