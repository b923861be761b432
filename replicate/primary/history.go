package primary

import (
	"errors"
	"fmt"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// checkHistory makes sure the backup's journal is a prefix of ours.
func (s *Shipper) checkHistory(w *replpb.Welcome) error {
	if w.VolumeId != "" && w.VolumeId != s.volumeID {
		return fmt.Errorf("backup serves volume %s, not %s: %w", w.VolumeId, s.volumeID, ErrNeedsResync)
	}
	if first := s.store.First(); first > w.DurableSeq+1 {
		return fmt.Errorf("backup holds seq %d but the journal starts at %d: %w", w.DurableSeq, first, ErrNeedsResync)
	}
	if w.DurableSeq == 0 {
		if s.snaps != nil {
			// A backup with an empty journal gets a resync before anything
			// else: its volume may be anything, and checksums make a copy
			// that is already right cheap to confirm.
			return fmt.Errorf("backup has an empty journal: %w", ErrNeedsResync)
		}
		return nil
	}
	if w.DurableSeq > s.store.Last().Seq {
		return fmt.Errorf("backup holds seq %d, this primary only %d: %w", w.DurableSeq, s.store.Last().Seq, ErrNeedsResync)
	}
	enc, err := s.store.Get(w.DurableSeq)
	if errors.Is(err, journal.ErrNotFound) {
		return fmt.Errorf("batch %d is no longer in the journal: %w", w.DurableSeq, ErrNeedsResync)
	} else if err != nil {
		return err
	}
	h, err := journal.DecodeHeader(enc)
	if err != nil {
		return err
	}
	if h.Checksum != w.DurableChecksum {
		return fmt.Errorf("batch %d differs on the backup: %w", w.DurableSeq, ErrNeedsResync)
	}
	return nil
}
