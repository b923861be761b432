package journal

import (
	"errors"
	"fmt"
)

// ErrChain refuses a batch that does not continue the stored chain.
var ErrChain = errors.New("batch does not follow the journal")

// AppendEncoded durably stores already-encoded batches (received from a
// primary) in one synced write. Each must verify and continue the chain:
// seq one past the last, Prev equal to the last checksum, epoch not below
// the journal's. It returns the new last header.
func (s *Store) AppendEncoded(encs [][]byte) (Header, error) {
	_, last, err := s.appendEncoded(encs, false)
	return last, err
}

// AppendDecoded is AppendEncoded that also returns the batches decoded, so
// that a backup that applies them next does not decompress and parse them
// again.
func (s *Store) AppendDecoded(encs [][]byte) ([]*Batch, Header, error) {
	return s.appendEncoded(encs, true)
}

func (s *Store) appendEncoded(encs [][]byte, keep bool) ([]*Batch, Header, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.last
	need := 0
	for _, enc := range encs {
		need += len(enc)
	}
	if err := s.space.admit(int64(need)); err != nil {
		return nil, s.last, fmt.Errorf("append batches: %w", err)
	}
	appendDelay() // a failpoint: a slow disk
	var out []*Batch
	for _, enc := range encs {
		h, ops, err := decode(enc, keep)
		if err != nil {
			return nil, s.last, err
		}
		if h.Seq != last.Seq+1 || (last.Seq != 0 && h.Prev != last.Checksum) {
			return nil, s.last, fmt.Errorf("batch %d (prev %08x) after %d (%08x): %w", h.Seq, h.Prev, last.Seq, last.Checksum, ErrChain)
		}
		// Epochs never fall along the chain. (A primary of a new epoch
		// also ships older batches of earlier epochs to catch a backup up;
		// the session's epoch is checked by the receiver.)
		if h.Epoch < last.Epoch {
			return nil, s.last, fmt.Errorf("batch %d has epoch %d after epoch %d: %w", h.Seq, h.Epoch, last.Epoch, ErrChain)
		}
		if keep {
			out = append(out, batchOf(h, ops))
		}
		last = h
	}
	if len(encs) > 0 {
		if err := s.appendLog(last.Seq+1-uint64(len(encs)), encs, true); err != nil {
			return nil, s.last, fmt.Errorf("append batches: %w", err)
		}
	}
	if last.Seq != s.last.Seq {
		s.setLast(last)
	}
	return out, last, nil
}
