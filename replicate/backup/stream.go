package backup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// maxAppend and maxAppendBytes bound what one synced write stores, and so
// what a backup holds in memory for one primary.
const (
	maxAppend      = 64
	maxAppendBytes = 64 << 20
)

// backupStream is a backup's end of the replication stream: gRPC's, or a
// raw stream's (wire.BackupStream).
type backupStream interface {
	Send(*replpb.BackupMsg) error
	Recv() (*replpb.PrimaryMsg, error)
}

// Stream serves one primary over gRPC. As a raw stream's, its session
// outlives a failed stream until serveStream returns, so that batches
// acked as received are still stored (keepReceived); the stream's failure
// shows in its Recv and Send.
func (b *Backup) Stream(stream replpb.Replication_StreamServer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	return b.serveStream(ctx, stream)
}

// serveStream serves one primary: Hello, Welcome, then batches in and
// acks out, until parent ends, the stream fails or a newer session takes
// over.
func (b *Backup) serveStream(parent context.Context, stream backupStream) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		b.m.rejected.WithLabelValues("protocol").Inc()
		return stream.Send(reject(replpb.Reject_UNKNOWN, 0, "stream must start with Hello"))
	}
	// The progress channel is always taken before the applied seq is read
	// for a message: an apply that lands between the read and the wait
	// closes the channel waited on, and is reported, instead of going
	// unreported until the next one.
	progressed := b.appliedChanged()
	ctx, w, err := b.admit(parent, stream, hello, b.askIssued(parent, hello.Epoch))
	if err != nil {
		return err
	}
	b.streams.Add(1)
	defer func() {
		if b.streams.Add(-1) == 0 {
			b.cfg.Events.Emit(events.KindPrimaryDown, "epoch", hello.Epoch)
		}
	}()
	// Acks go out from the loop below and, at ack level memory, from the
	// receiving goroutine: one Send at a time.
	stream = &lockedStream{backupStream: stream}
	if err := stream.Send(&replpb.BackupMsg{Msg: &replpb.BackupMsg_Welcome{Welcome: w}}); err != nil {
		return err
	}
	var ackedSeq atomic.Uint64 // the newest batch acked as received
	incoming, recvErr := b.receive(ctx, stream, hello, &ackedSeq)
	return b.storeLoop(ctx, stream, hello, progressed, incoming, recvErr, &ackedSeq)
}

// receive reads the stream's batches into incoming, acking each one as
// received at once at ack level memory. Every way out reports on recvErr
// before incoming closes.
func (b *Backup) receive(ctx context.Context, stream backupStream, hello *replpb.Hello, ackedSeq *atomic.Uint64) (<-chan *replpb.Batch, <-chan error) {
	incoming := make(chan *replpb.Batch, 4)
	recvErr := make(chan error, 1)
	go func() {
		// Every way out reports on recvErr before incoming closes, so the
		// loop below never waits for an error that will not come.
		defer close(incoming)
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			bt := msg.GetBatch()
			if bt == nil {
				recvErr <- errors.New("unexpected message after Hello")
				return
			}
			// At ack level memory the ack goes out from here, while the
			// loop below may still be storing earlier batches.
			if hello.AckReceived {
				seq, err := b.ackReceived(stream, hello.Epoch, [][]byte{bt.Encoded})
				if err != nil {
					recvErr <- err
					return
				}
				ackedSeq.Store(max(ackedSeq.Load(), seq))
			}
			select {
			case incoming <- bt:
			case <-ctx.Done():
				recvErr <- ctx.Err()
				return
			}
		}
	}()
	return incoming, recvErr
}

// storeLoop stores what arrives in groups, acks each group once it is
// durable, and acks on every heartbeat and every apply, until the stream
// or the session ends.
func (b *Backup) storeLoop(ctx context.Context, stream backupStream, hello *replpb.Hello, progressed <-chan struct{},
	incoming <-chan *replpb.Batch, recvErr <-chan error, ackedSeq *atomic.Uint64) error {
	// An ack at least every heartbeat tells the primary this backup is
	// alive (a raw stream's primary gives up after rawSilence without one).
	heartbeat := time.NewTicker(heartbeatEvery)
	defer heartbeat.Stop()
	acks := &acker{stream: stream, b: b, delay: time.NewTimer(time.Hour)}
	acks.delay.Stop()
	defer acks.delay.Stop()
	// A stream that fails while batches it acked as received (ack level
	// memory) wait unstored stores them first: the primary may have
	// counted those acks, and may be gone.
	ended := func(err error) error {
		if hello.AckReceived {
			b.keepReceived(ctx, hello.Epoch, incoming, ackedSeq)
		}
		return err
	}
	for {
		var encs [][]byte
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-heartbeat.C:
			if err := acks.send(); err != nil {
				return ended(err)
			}
			continue
		case <-progressed:
			progressed = b.appliedChanged()
			if err := acks.applied(); err != nil {
				return ended(err)
			}
			continue
		case <-acks.delay.C:
			if err := acks.send(); err != nil {
				return ended(err)
			}
			continue
		case bt, ok := <-incoming:
			if !ok {
				return <-recvErr
			}
			encs = drain(append(encs, bt.Encoded), incoming)
		}
		if ctx.Err() != nil {
			// A newer session took over: nothing of ours may be stored or acked.
			return ctx.Err()
		}
		start := time.Now()
		if rej := b.store1(hello.Epoch, encs); rej != nil {
			stream.Send(rej)
			return fmt.Errorf("rejected: %s", rej.GetReject().GetReason())
		}
		b.m.store.Observe(time.Since(start).Seconds())
		b.m.durable.Set(float64(b.store.Last().Seq))
		select {
		case b.kick <- struct{}{}:
		default:
		}
		progressed = b.appliedChanged()
		if err := acks.send(); err != nil {
			return ended(err)
		}
		ackedFailpoint(b)
	}
}

// drain adds to encs the batches already waiting in incoming, up to one
// append's worth: one synced append for a group that arrived together.
func drain(encs [][]byte, incoming <-chan *replpb.Batch) [][]byte {
	size := 0
	for _, e := range encs {
		size += len(e)
	}
	for len(encs) < maxAppend && size < maxAppendBytes {
		select {
		case bt, ok := <-incoming:
			if !ok {
				return encs
			}
			encs = append(encs, bt.Encoded)
			size += len(bt.Encoded)
		default:
			return encs
		}
	}
	return encs
}

// ackReceived acks batches as received once each one's checksums hold
// and none claims a later epoch than the session's (--ack-level memory):
// they are in this backup's memory, durable a moment later. A batch that
// fails the checks is left to store1, which refuses it. It returns the
// seq acked (0: none).
func (b *Backup) ackReceived(stream backupStream, epoch uint64, encs [][]byte) (uint64, error) {
	var last uint64
	for _, enc := range encs {
		h, err := journal.Verify(enc)
		if err != nil || h.Epoch > epoch {
			break
		}
		last = h.Seq
	}
	if last == 0 || !b.mayAckReceived(epoch, last) {
		return 0, nil
	}
	// Only received_seq: the durable seq is the store's, whose lock an
	// earlier batch's append may hold for as long as the disk takes, and
	// the primary keeps the highest it was told anyway.
	blocked, blockedSeq := b.blockedWords()
	err := stream.Send(&replpb.BackupMsg{Msg: &replpb.BackupMsg_Ack{Ack: &replpb.Ack{
		AppliedSeq: b.applied.Load(), Stalled: b.stalled.Load(), ReceivedSeq: last, ApplyBlockedSeq: blockedSeq, ApplyBlocked: blocked,
	}}})
	if err != nil {
		return 0, err
	}
	return last, nil
}

// keepReceivedFor bounds how long a failed stream waits for the batches it
// acked as received to come out of its receiver.
const keepReceivedFor = 2 * time.Second

// keepReceived stores, after the session's stream failed, the batches it
// acked as received up to *acked that are not yet durable, as they come
// out of incoming. A newer session (ctx ended) stores nothing of ours: its
// primary resends what this backup lacks.
func (b *Backup) keepReceived(ctx context.Context, epoch uint64, incoming <-chan *replpb.Batch, acked *atomic.Uint64) {
	deadline := time.NewTimer(keepReceivedFor)
	defer deadline.Stop()
	kept := 0
wait:
	for b.store.Last().Seq < acked.Load() && ctx.Err() == nil {
		select {
		case bt, ok := <-incoming:
			if !ok {
				break wait
			}
			if rej := b.store1(epoch, [][]byte{bt.Encoded}); rej != nil {
				b.log.Error("a batch acked as received could not be stored after the stream failed", "err", rej.GetReject().GetReason())
				return
			}
			kept++
		case <-deadline.C:
			break wait
		}
	}
	if kept > 0 {
		b.log.Info("stored the batches acked as received after the stream failed", "batches", kept, "durable_seq", b.store.Last().Seq)
	}
	if last, want := b.store.Last().Seq, acked.Load(); last < want {
		b.log.Error("batches acked as received are not stored: the stream ended before they came out of it", "durable_seq", last, "acked_seq", want)
	}
}

// lockedStream serializes Send, which gRPC does not allow concurrently.
type lockedStream struct {
	backupStream
	mu sync.Mutex
}

func (l *lockedStream) Send(m *replpb.BackupMsg) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.backupStream.Send(m)
}

// appliedAckDelay is how long apply progress may wait for an ack to
// carry it before it is sent on its own (a variable for tests).
var appliedAckDelay = 10 * time.Millisecond

// acker sends a stream's acks. Every ack carries the durable and the
// applied seq; an apply's progress alone waits up to appliedAckDelay for
// the next batch's ack to carry it, so that a steady stream of batches
// costs one ack each, not two. A stall is reported at once.
type acker struct {
	stream      backupStream
	b           *Backup
	delay       *time.Timer // armed while progress waits to be sent
	armed       bool
	sentApplied uint64
	sentBlocked *applyBlock
}

// applied notes that the applied seq advanced (or the backup stalled, or
// a batch it cannot apply changed).
func (a *acker) applied() error {
	if a.b.stalled.Load() || a.b.blocked.Load() != a.sentBlocked {
		return a.send()
	}
	if !a.armed && a.b.applied.Load() > a.sentApplied {
		a.armed = true
		a.delay.Reset(appliedAckDelay)
	}
	return nil
}

// send sends an ack now, with whatever progress waited.
func (a *acker) send() error {
	if a.armed {
		a.armed = false
		a.delay.Stop()
	}
	applied, bl := a.b.applied.Load(), a.b.blocked.Load()
	ack := &replpb.Ack{DurableSeq: a.b.store.Last().Seq, AppliedSeq: applied, Stalled: a.b.stalled.Load()}
	if bl != nil {
		ack.ApplyBlocked, ack.ApplyBlockedSeq = bl.String(), bl.Seq
	}
	err := a.stream.Send(&replpb.BackupMsg{Msg: &replpb.BackupMsg_Ack{Ack: ack}})
	if err == nil {
		a.sentApplied, a.sentBlocked = applied, bl
	}
	return err
}

// store1 stores received batches durably; a non-nil result rejects them.
func (b *Backup) store1(sessionEpoch uint64, encs [][]byte) *replpb.BackupMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	epoch := b.store.Epoch()
	if b.fencedOut(sessionEpoch) {
		b.m.rejected.WithLabelValues("fenced").Inc()
		return b.refuseFenced(sessionEpoch)
	}
	if sessionEpoch < epoch {
		b.m.rejected.WithLabelValues("stale_epoch").Inc()
		return reject(replpb.Reject_STALE_EPOCH, epoch, "epoch %d is below %d: this primary was deposed", sessionEpoch, epoch)
	}
	for _, enc := range encs {
		h, err := journal.DecodeHeader(enc)
		if err == nil && h.Epoch > sessionEpoch {
			err = fmt.Errorf("batch %d claims epoch %d in a session of epoch %d: %w", h.Seq, h.Epoch, sessionEpoch, journal.ErrCorrupt)
		}
		if err != nil {
			b.m.rejected.WithLabelValues("corrupt").Inc()
			b.log.Error("refused a batch", "err", err)
			return reject(replpb.Reject_CORRUPT, epoch, "%v", err)
		}
	}
	batches, _, err := b.store.AppendDecoded(encs)
	if err != nil {
		code, label := replpb.Reject_STORAGE, "storage"
		switch {
		case errors.Is(err, journal.ErrChain):
			code, label = replpb.Reject_GAP, "gap"
		case errors.Is(err, journal.ErrCorrupt), errors.Is(err, journal.ErrVersion), errors.Is(err, journal.ErrTooLarge):
			code, label = replpb.Reject_CORRUPT, "corrupt"
		}
		b.m.rejected.WithLabelValues(label).Inc()
		b.log.Error("refused batches", "err", err)
		return reject(code, epoch, "%v", err)
	}
	if !b.stalled.Load() { // a stalled backup applies nothing until a resync
		b.decoded.put(batches, encs)
	}
	for _, bt := range batches {
		if !bt.More {
			b.complete.Store(bt.Seq)
		}
	}
	return nil
}
