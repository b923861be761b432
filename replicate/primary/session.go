package primary

import (
	"context"
	"errors"
	"fmt"

	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// A shipper's session with its backup: the Hello and the Welcome, the
// checks that end a session for a resync, the sending loop and the acks.

func (s *Shipper) session(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	s.cancel.Store(&cancel)
	stream, transport, err := s.openStream(ctx)
	if err != nil {
		return err
	}
	w, sent, err := s.handshake(stream)
	if err != nil {
		return err
	}
	if sent.Known() {
		s.confirmed.Store(&sent) // admit noted it before it welcomed the stream
		s.notify()
	}
	s.sparseSums.Store(w.SparseSums)
	s.rootEntry.Store(w.RootEntry)
	s.allocMap.Store(w.AllocMap)
	s.resyncScope.Store(w.ResyncScope)
	if err := s.admitWelcome(w); err != nil {
		return err
	}
	s.setStale(false)
	s.acked.Store(w.DurableSeq)
	s.received.Store(w.DurableSeq) // what a crash may have lost is sent again
	s.applied.Store(w.AppliedSeq)
	s.setStalled(w.Stalled)
	s.up.Store(true)
	s.streamUp()
	s.m.state.WithLabelValues(s.addr).Set(1)
	rawUp := s.m.raw.WithLabelValues(s.addr)
	rawUp.Set(0)
	s.overGRPC.Store(transport != "raw")
	if transport == "raw" {
		rawUp.Set(1)
		defer rawUp.Set(0)
	}
	s.m.acked.WithLabelValues(s.addr).Set(float64(w.DurableSeq))
	s.joinIfCaughtUp()
	s.notify()
	s.ev.Emit(events.KindBackupUp, "backup", s.addr, "transport", transport, "durable_seq", w.DurableSeq)
	s.log.Info("replication stream up", append([]any{"transport", transport, "backup_durable_seq", w.DurableSeq, "primary_last_seq", s.store.Last().Seq}, s.upAgain()...)...)

	return s.ship(ctx, stream, w.DurableSeq+1)
}

// handshake sends the Hello (the epoch, the last seq, the ack policy
// announced) and reads the backup's Welcome, or its refusal.
func (s *Shipper) handshake(stream wire.PrimaryEnd) (*replpb.Welcome, wire.AckPolicy, error) {
	sent := s.announced()
	if err := stream.Send(&replpb.PrimaryMsg{Msg: &replpb.PrimaryMsg_Hello{Hello: &replpb.Hello{
		VolumeId: s.volumeID, Epoch: s.store.Epoch(), LastSeq: s.store.Last().Seq,
		AckNeed: sent.Need, Backups: sent.Of, Degrade: sent.Degrade, AckReceived: s.memory,
	}}}); err != nil {
		return nil, sent, err
	}
	msg, err := stream.Recv()
	if err != nil {
		return nil, sent, err
	}
	if rej := msg.GetReject(); rej != nil {
		return nil, sent, s.rejected(rej)
	}
	w := msg.GetWelcome()
	if w == nil {
		return nil, sent, errors.New("backup did not answer Hello with Welcome")
	}
	return w, sent, nil
}

// admitWelcome takes what the backup's Welcome says it needs for a
// resync, and ends the session if it needs one: forced, a history that
// parted from this journal's, or a stalled volume.
func (s *Shipper) admitWelcome(w *replpb.Welcome) error {
	if s.force.Load() {
		// After the Welcome, not before the Hello: the resync needs what
		// the backup takes. Without it a mount's first resync left out
		// the root entry, and the backup kept its own root's mtime,
		// mode, owner and xattrs.
		return errors.New("resync requested")
	}
	if err := s.checkHistory(w); err != nil {
		s.setStale(true)
		return err
	}
	if w.Stalled {
		s.setStalled(true)
		return fmt.Errorf("backup stalled: %w", ErrNeedsResync)
	}
	return nil
}

// ship sends every batch from next on as the journal gets it, until the
// stream fails, the backup's acks stop, or ctx ends.
func (s *Shipper) ship(ctx context.Context, stream wire.PrimaryEnd, next uint64) error {
	recvErr := make(chan error, 1)
	go func() { recvErr <- s.receive(stream) }()
	for {
		changed := s.store.Changed()
		for next <= s.store.Last().Seq {
			enc, err := s.store.Get(next)
			if errors.Is(err, journal.ErrCorrupt) {
				return s.damaged(next, err)
			}
			if err != nil {
				return fmt.Errorf("read batch %d: %w", next, err)
			}
			if err := stream.Send(&replpb.PrimaryMsg{Msg: &replpb.PrimaryMsg_Batch{Batch: &replpb.Batch{Seq: next, Encoded: enc}}}); err != nil {
				return err
			}
			s.m.sent.WithLabelValues(s.addr).Inc()
			s.m.sentB.WithLabelValues(s.addr).Add(float64(len(enc)))
			next++
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-recvErr:
			return err
		case <-changed:
		}
	}
}

// damaged ends a session whose backup needs batch seq, which the journal
// holds damaged (its checksum fails on the disk): never shipped, and no
// backup takes it anyway, so the backup is resynced from the volume.
func (s *Shipper) damaged(seq uint64, err error) error {
	s.setStale(true)
	if s.damagedSeq.Swap(seq) != seq {
		s.log.Error("a batch this backup needs is damaged in the journal; resyncing the backup from the volume instead", "seq", seq, "err", err)
	}
	return fmt.Errorf("batch %d: %w: %w", seq, err, ErrNeedsResync)
}

func (s *Shipper) receive(stream wire.PrimaryEnd) error {
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		if rej := msg.GetReject(); rej != nil {
			return s.rejected(rej)
		}
		if ack := msg.GetAck(); ack != nil {
			if ack.ReceivedSeq > s.received.Load() {
				s.received.Store(ack.ReceivedSeq)
			}
			if ack.DurableSeq > s.acked.Load() {
				s.acked.Store(ack.DurableSeq)
				s.m.acked.WithLabelValues(s.addr).Set(float64(ack.DurableSeq))
			}
			if ack.AppliedSeq > s.applied.Load() { // acks from two goroutines may cross
				s.applied.Store(ack.AppliedSeq)
			}
			s.setStalled(ack.Stalled)
			s.noteBlocked(ack.ApplyBlockedSeq, ack.ApplyBlocked)
			s.joinIfCaughtUp()
			s.notify()
			if ack.Stalled {
				return fmt.Errorf("backup stalled: %w", ErrNeedsResync)
			}
		}
	}
}
