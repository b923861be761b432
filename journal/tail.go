package journal

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pbfs/pbfs/internal/sparse"
)

// A segment's records end where the next one does not parse as the seq
// that follows. What lies there tells a crash's torn append from damage:
// zeros, or an old record of a recycled segment (a lower seq), end it
// cleanly; the header of the expected seq with its body cut short or not
// matching its checksum, or bytes that are no header at all, are a torn
// append, unless an intact record of a later seq follows, which no append
// ever wrote before the one it follows; a header of another seq where the
// next belongs is damage too.

// tailNote describes what follows the last record of seg (at seg.end,
// whose seq would be want); "" for a clean end. damaged is false for a
// torn append.
func tailNote(f *os.File, size int64, seg *segFile, want uint64) (note string, damaged bool) {
	off := seg.end
	if off+recHdrSize > size {
		if off < size && !zeros(f, off, size-off) {
			return fmt.Sprintf("%s: %d bytes after batch %d hold no whole record header (a torn append)", seg.path, size-off, want-1), false
		}
		return "", false
	}
	hdr := make([]byte, recHdrSize)
	if _, err := f.ReadAt(hdr, off); err != nil {
		return fmt.Sprintf("%s: read at %d: %v", seg.path, off, err), true
	}
	rh, err := parseRecordHeader(hdr)
	switch {
	case err != nil && zeros(f, off, recHdrSize):
		return "", false
	case err != nil:
		// A header a power loss tore across a sector boundary looks like
		// this too; only an intact record after it proves damage.
		note := fmt.Sprintf("%s: the bytes at offset %d, where batch %d would start, are no record header", seg.path, off, want)
		if seq, at, ok := nextRecord(f, off+1, size, want); ok {
			return note + fmt.Sprintf("; batch %d follows intact at offset %d", seq, at), true
		}
		return note + ", with nothing after it (a torn append)", false
	case rh.seq < want:
		return "", false // a recycled segment's old record
	case rh.seq > want:
		return fmt.Sprintf("%s: batch %d is missing; batch %d follows at offset %d", seg.path, want, rh.seq, off), true
	}
	next := off + recHdrSize + int64(rh.n)
	if next+recHdrSize <= size {
		if _, err := f.ReadAt(hdr, next); err == nil {
			if nh, err := parseRecordHeader(hdr); err == nil && nh.seq == want+1 {
				return fmt.Sprintf("%s: batch %d at offset %d is damaged, and batch %d follows it intact", seg.path, want, off, want+1), true
			}
		}
	}
	return fmt.Sprintf("%s: batch %d at offset %d is cut short or fails its checksum, with nothing after it (a torn append)", seg.path, want, off), false
}

// keepCut copies what lies past seg's last record, up to its last byte
// that is not zero, to a file beside the log ("cut-" + the segment's name
// + the time) before a damaged tail is cut off: the records in it may be
// intact, and an operator may want them.
func (l *batchLog) keepCut(f *os.File, seg *segFile, size int64) error {
	buf := make([]byte, size-seg.end)
	if _, err := f.ReadAt(buf, seg.end); err != nil {
		return fmt.Errorf("keep the cut tail of %s: %w", seg.path, err)
	}
	n := len(buf)
	for n > 0 && buf[n-1] == 0 {
		n--
	}
	path := filepath.Join(l.dir, "cut-"+filepath.Base(seg.path)+"-"+time.Now().UTC().Format("20060102T150405Z"))
	if err := writeSynced(path, buf[:n]); err != nil {
		return fmt.Errorf("keep the cut tail of %s: %w", seg.path, err)
	}
	if err := syncDir(l.dir); err != nil {
		return fmt.Errorf("keep the cut tail of %s: %w", seg.path, err)
	}
	l.log.Error("journal: kept the damaged tail cut off the batch log", "file", path, "bytes", n, "from_offset", seg.end)
	return nil
}

// nextRecord finds the first whole record header in f from off on whose
// seq is at least want: what follows a damaged header, if anything.
func nextRecord(f *os.File, off, size int64, want uint64) (uint64, int64, bool) {
	buf := make([]byte, size-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return 0, 0, false
	}
	for i := 0; i+recHdrSize <= len(buf); i++ {
		if binary.LittleEndian.Uint32(buf[i:]) != recMagic {
			continue
		}
		if rh, err := parseRecordHeader(buf[i : i+recHdrSize]); err == nil && rh.seq >= want {
			return rh.seq, off + int64(i), true
		}
	}
	return 0, 0, false
}

// writeSynced writes data to a new file at path and syncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// zeros reports whether f holds only zero bytes in [off, off+n).
func zeros(f *os.File, off, n int64) bool {
	buf := make([]byte, min(n, 64<<10))
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := f.ReadAt(buf[:k], off); err != nil {
			return false
		}
		if !sparse.AllZero(buf[:k]) {
			return false
		}
		off, n = off+k, n-k
	}
	return true
}
