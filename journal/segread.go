package journal

import (
	"fmt"
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
	buf := make([]byte, loc.n)
	if err := l.readAt(loc, buf); err != nil {
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
