package journal

import (
	"fmt"
	"os"
)

// A segment's records end where the next one does not parse as the seq
// that follows. What lies there tells a crash's torn append from damage:
// zeros, or an old record of a recycled segment (a lower seq), end it
// cleanly; the header of the expected seq with its body cut short or not
// matching its checksum is a torn append, unless the next seq's record
// follows it intact, which no append ever wrote before the one it
// follows; anything else is damage.

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
		return fmt.Sprintf("%s: the bytes at offset %d, where batch %d would start, are no record header", seg.path, off, want), true
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

// zeros reports whether f holds only zero bytes in [off, off+n).
func zeros(f *os.File, off, n int64) bool {
	buf := make([]byte, min(n, 64<<10))
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := f.ReadAt(buf[:k], off); err != nil {
			return false
		}
		for _, b := range buf[:k] {
			if b != 0 {
				return false
			}
		}
		off, n = off+k, n-k
	}
	return true
}
