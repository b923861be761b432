package journal

import (
	"fmt"
	"hash/crc32"
	"os"
)

// The batch log's read side: a body by seq, and scans in order. Readers
// share mu with the appender; a segment other than the one being written
// is opened for the read.

// get returns the body of seq. A body appended lately is shared with
// other readers: it must not be modified.
func (l *batchLog) get(seq uint64) ([]byte, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if seq < l.first || seq-l.first >= uint64(len(l.index)) {
		return nil, fmt.Errorf("get batch %d: %w", seq, ErrNotFound)
	}
	if b := l.hot.get(seq); b != nil {
		return b, nil
	}
	loc := l.index[seq-l.first]
	rec := make([]byte, recHdrSize+int(loc.n))
	if err := l.readAt(recLoc{seg: loc.seg, off: loc.off - recHdrSize, n: uint32(len(rec))}, rec); err != nil {
		return nil, fmt.Errorf("get batch %d: %w", seq, err)
	}
	// Read back from the disk, which may have damaged it since: a reader
	// (a shipper, for a backup that lags) must not pass it on unchecked.
	if rh, err := parseRecordHeader(rec[:recHdrSize]); err != nil || rh.seq != seq || rh.n != loc.n ||
		crc32.Checksum(rec[recHdrSize:], castagnoliTable) != rh.bodyCRC {
		if l.damage != nil {
			l.damage(seq, seq, loc.seg.path)
		}
		return nil, fmt.Errorf("get batch %d: its record at offset %d of %s fails its checksum (damaged on disk since it was written): %w",
			seq, loc.off-recHdrSize, loc.seg.path, ErrCorrupt)
	}
	return rec[recHdrSize:], nil
}

// head returns the first n bytes of seq's body (a batch's header), read
// without the rest; unlike get, nothing checks them against the record.
func (l *batchLog) head(seq uint64, n int) ([]byte, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if seq < l.first || seq-l.first >= uint64(len(l.index)) {
		return nil, fmt.Errorf("get batch %d: %w", seq, ErrNotFound)
	}
	if b := l.hot.get(seq); b != nil && len(b) >= n {
		return b[:n], nil
	}
	loc := l.index[seq-l.first]
	if int(loc.n) < n {
		return nil, fmt.Errorf("get batch %d: a record of %d bytes: %w", seq, loc.n, ErrCorrupt)
	}
	buf := make([]byte, n)
	if err := l.readAt(recLoc{seg: loc.seg, off: loc.off, n: uint32(n)}, buf); err != nil {
		return nil, fmt.Errorf("get batch %d: %w", seq, err)
	}
	return buf, nil
}

// readAt reads loc's body into buf; the caller holds mu.
func (l *batchLog) readAt(loc recLoc, buf []byte) error {
	f := l.w
	if loc.seg != l.wseg {
		var err error
		if f, err = os.Open(loc.seg.path); err != nil {
			return err
		}
		defer f.Close()
	}
	if f == nil {
		return fmt.Errorf("segment %s is not open", loc.seg.path)
	}
	_, err := f.ReadAt(buf, loc.off)
	return err
}

// scan calls fn with every held batch from seq from on, in order. A batch
// trimmed while the scan runs is skipped.
func (l *batchLog) scan(from uint64, fn func(seq uint64, body []byte) error) error {
	var buf []byte
	for seq := from; ; seq++ {
		l.mu.RLock()
		if seq < l.first {
			seq = l.first
		}
		if len(l.index) == 0 || seq-l.first >= uint64(len(l.index)) {
			l.mu.RUnlock()
			return nil
		}
		loc := l.index[seq-l.first]
		buf = growTo(buf, int(loc.n))
		err := l.readAt(loc, buf)
		l.mu.RUnlock()
		if err != nil {
			return fmt.Errorf("scan journal: batch %d: %w", seq, err)
		}
		if err := fn(seq, buf); err != nil {
			return err
		}
	}
}
