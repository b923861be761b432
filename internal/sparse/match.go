package sparse

import (
	"errors"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// Match makes the allocation of f, whose size is size, that of want (a
// Map of another file of that size), keeping f's bytes where want has
// data: there f's bytes are written again (zeros included) where f does
// not hold data; where want has a hole f is punched; where want has
// unwritten space f's range becomes unwritten space; past the size f
// ends up holding want's preallocation and no other. Outside want's data
// f reads as zeros afterwards. Where f's file system has no FIEMAP, Match
// goes by SEEK_DATA alone: it punches every hole, allocates every
// unwritten range, and adds want's preallocation past the size without
// removing any f has.
func Match(f *os.File, size int64, want []AllocExtent) error {
	fd := int(f.Fd())
	have, exact, err := mapOrData(fd, size)
	if err != nil {
		return err
	}
	// Data first: writing into an unwritten extent may turn more of it
	// into data (ext4 zeroes a short remainder rather than split it),
	// which the pass below then puts back.
	rewrote := false
	w, h := kindAt{want}, kindAt{have}
	for off := int64(0); off < size; {
		wk, wend := w.at(off)
		hk, hend := h.at(off)
		end := min(wend, hend, size)
		if wk == data && hk != data {
			if err := rewrite(f, off, end); err != nil {
				return err
			}
			rewrote = true
		}
		off = end
	}
	if rewrote {
		if have, exact, err = mapOrData(fd, size); err != nil {
			return err
		}
	}
	w, h = kindAt{want}, kindAt{have}
	for off := int64(0); off < size; {
		wk, wend := w.at(off)
		hk, hend := h.at(off)
		end := min(wend, hend, size)
		if err := matchRange(f, wk, hk, exact, off, end); err != nil {
			return err
		}
		off = end
	}
	return matchPastEOF(f, size, want, have, exact)
}

// matchRange makes [off, end) of f, now of kind hk, of kind wk (not data).
func matchRange(f *os.File, wk, hk int, exact bool, off, end int64) error {
	const punchMode = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
	switch {
	case wk == hole && (hk != hole || !exact):
		return fallocate(f, punchMode, off, end)
	case wk == unwritten && hk == data:
		if err := fallocate(f, punchMode, off, end); err != nil {
			return err
		}
		return fallocate(f, unix.FALLOC_FL_KEEP_SIZE, off, end)
	case wk == unwritten && (hk == hole || !exact):
		return fallocate(f, unix.FALLOC_FL_KEEP_SIZE, off, end)
	}
	return nil
}

// matchPastEOF gives f want's preallocation past size, and no other.
// Punching past the end frees nothing on ext4; a truncate to the size
// frees all of it, and want's is then allocated again.
func matchPastEOF(f *os.File, size int64, want, have []AllocExtent, exact bool) error {
	wantPast, havePast := PastEOF(want, size), PastEOF(have, size)
	if exact && slices.Equal(wantPast, havePast) {
		return nil
	}
	if exact && len(havePast) > 0 {
		if err := f.Truncate(size); err != nil {
			return err
		}
	}
	for _, e := range wantPast {
		if err := fallocate(f, unix.FALLOC_FL_KEEP_SIZE, e.Off, e.End); err != nil {
			return err
		}
	}
	return nil
}

// PastEOF is where exts hold space past a file of size bytes: from the
// page after the one the size ends in (the rest of that page belongs to
// the last block whatever the block size).
func PastEOF(exts []AllocExtent, size int64) []Extent {
	from := (size + 4095) / 4096 * 4096
	var out []Extent
	for _, e := range Allocated(exts) {
		if e.End > from {
			out = append(out, Extent{max(e.Off, from), e.End})
		}
	}
	return out
}

// mapOrData is Map, or where the file system has none, the data SEEK_DATA
// finds (exact false).
func mapOrData(fd int, size int64) ([]AllocExtent, bool, error) {
	m, err := Map(fd, size)
	if !errors.Is(err, ErrNoMap) {
		return m, true, err
	}
	d, err := DataExtents(fd, size)
	if err != nil {
		return nil, false, err
	}
	for _, e := range d {
		m = append(m, AllocExtent{Off: e.Off, End: e.End})
	}
	return m, false, nil
}
