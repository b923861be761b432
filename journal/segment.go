package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The batch log keeps encoded batches in segment files, each a run of
// records (docs/FORMAT.md §6.1):
//
//	magic "PBR1" (4) | body length (4) | seq (8) | CRC-32C of the body (4) |
//	CRC-32C of bytes 0..19 (4) | body
//
// little-endian. A segment is named by the seq its first record carries
// ("%016x.seg"); seqs run on by one across records and segments. A segment
// is preallocated to segmentSize, so appending a record rewrites blocks the
// file already has: its fdatasync flushes data, not the file system's
// metadata, and there is no mmap to fault or msync.
const (
	recMagic   = 0x31524250 // "PBR1" little-endian
	recHdrSize = 24
	segSuffix  = ".seg"
)

// segmentSize is how far a segment is preallocated and when the log moves
// on to the next one (a variable for tests).
var segmentSize int64 = 64 << 20

var castagnoliTable = crc32.MakeTable(crc32.Castagnoli)

// recordHeader returns the header of the record of body as seq.
func recordHeader(seq uint64, body []byte) []byte {
	h := make([]byte, recHdrSize)
	binary.LittleEndian.PutUint32(h[0:], recMagic)
	binary.LittleEndian.PutUint32(h[4:], uint32(len(body)))
	binary.LittleEndian.PutUint64(h[8:], seq)
	binary.LittleEndian.PutUint32(h[16:], crc32.Checksum(body, castagnoliTable))
	binary.LittleEndian.PutUint32(h[20:], crc32.Checksum(h[:20], castagnoliTable))
	return h
}

// recHeader is a parsed record header.
type recHeader struct {
	n       uint32 // body length
	seq     uint64
	bodyCRC uint32
}

// errRecEnd: no record at this offset (zeros, a torn or stale header).
var errRecEnd = errors.New("no record here")

func parseRecordHeader(h []byte) (recHeader, error) {
	if binary.LittleEndian.Uint32(h[0:]) != recMagic ||
		binary.LittleEndian.Uint32(h[20:]) != crc32.Checksum(h[:20], castagnoliTable) {
		return recHeader{}, errRecEnd
	}
	return recHeader{n: binary.LittleEndian.Uint32(h[4:]), seq: binary.LittleEndian.Uint64(h[8:]), bodyCRC: binary.LittleEndian.Uint32(h[16:])}, nil
}

// segFile is one file of the log.
type segFile struct {
	first uint64 // the seq its first record carries (its name)
	path  string
	end   int64 // offset past its last record
	n     int   // records in it
	// tail describes what follows its last record when that is not a
	// clean end (tail.go), damaged when it is no torn append.
	tail    string
	damaged bool
}

func segName(first uint64) string { return fmt.Sprintf("%016x%s", first, segSuffix) }

func parseSegName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, segSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	v, err := strconv.ParseUint(hex, 16, 64)
	return v, err == nil
}

// recLoc is where one record's body lies.
type recLoc struct {
	seg *segFile
	off int64 // of the body
	n   uint32
}

// scanSegment reads seg's records from the start and returns their
// locations. The records end at the first offset that holds none: zeros
// past the last one, a header torn by a crash, or a record of the file's
// earlier life (a recycled segment holds records of lower seqs). With
// bodies set every body is checked against its CRC too, and the first
// that fails ends the records: a crash can tear the bodies of the newest
// segment, whose writes may not have been synced.
func scanSegment(seg *segFile, bodies bool) ([]recLoc, error) {
	f, err := os.Open(seg.path)
	if err != nil {
		return nil, fmt.Errorf("scan segment: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("scan segment: %w", err)
	}
	var locs []recLoc
	hdr := make([]byte, recHdrSize)
	var body []byte
	off, want := int64(0), seg.first
	for off+recHdrSize <= st.Size() {
		if _, err := f.ReadAt(hdr, off); err != nil {
			return nil, fmt.Errorf("scan segment %s: %w", seg.path, err)
		}
		rh, err := parseRecordHeader(hdr)
		if err != nil || rh.seq != want || int64(rh.n) > st.Size()-off-recHdrSize {
			break
		}
		if bodies {
			body = growTo(body, int(rh.n))
			if _, err := f.ReadAt(body, off+recHdrSize); err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("scan segment %s: %w", seg.path, err)
			}
			if crc32.Checksum(body, castagnoliTable) != rh.bodyCRC {
				break
			}
		}
		locs = append(locs, recLoc{seg: seg, off: off + recHdrSize, n: rh.n})
		off += recHdrSize + int64(rh.n)
		want++
	}
	seg.end, seg.n = off, len(locs)
	seg.tail, seg.damaged = tailNote(f, st.Size(), seg, want)
	return locs, nil
}

func growTo(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// listSegments returns the segments in dir, oldest first.
func listSegments(dir string) ([]*segFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var segs []*segFile
	for _, e := range entries { // ReadDir sorts by name: by first seq
		if first, ok := parseSegName(e.Name()); ok {
			segs = append(segs, &segFile{first: first, path: filepath.Join(dir, e.Name())})
		}
	}
	return segs, nil
}

// syncDir makes dir's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
