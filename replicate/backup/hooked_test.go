//go:build failpoints

package backup

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// The tests that hold a backup's store loop at a point (testHookAcked,
// failpoint.go): built with the failpoints, as make test builds them.

// TestApplyAfterAckIsReported: a batch applied after the ack that
// followed its store, but before the stream waits for progress again, is
// still reported to the primary. (The stream used to take the progress
// channel only when it came back to wait, so such an apply went unreported
// until the next one: the primary saw the batch durable and never applied,
// and a barrier waiting for the backup to apply it timed out.)
func TestApplyAfterAckIsReported(t *testing.T) {
	testHookAcked = func(b *Backup) {
		for deadline := time.Now().Add(5 * time.Second); b.applied.Load() < 1 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	t.Cleanup(func() { testHookAcked = nil })
	_, addr, _ := startBackup(t)
	s := dial(t, addr, "right")
	if m := hello(t, s, 1); m.GetWelcome() == nil {
		t.Fatalf("hello: %v", m)
	}
	msg, _ := batch(t, 1, 1, 0, journal.Op{Kind: journal.KindMkdir, Path: "d", Mode: 0o755})
	if err := s.Send(msg); err != nil {
		t.Fatal(err)
	}
	got := make(chan uint64, 8)
	go func() {
		for {
			m, err := s.Recv()
			if err != nil {
				close(got)
				return
			}
			got <- m.GetAck().GetAppliedSeq()
		}
	}()
	timeout := time.After(3 * time.Second)
	for {
		select {
		case applied, ok := <-got:
			if !ok {
				t.Fatal("stream ended before batch 1 was reported applied")
			}
			if applied >= 1 {
				return
			}
		case <-timeout:
			t.Fatal("batch 1 was applied but never reported applied")
		}
	}
}

// TestReceivedBatchesOutliveTheStream: at ack level memory, batches the
// backup acked as received are stored even when the stream fails before
// it got to them (the primary may have counted the acks and died).
func TestReceivedBatchesOutliveTheStream(t *testing.T) {
	for _, tr := range []struct {
		name string
		// open returns a stream and a way to break it as a dead primary would.
		open func(t *testing.T, addr string) (wire.PrimaryEnd, func())
	}{
		{"raw", func(t *testing.T, addr string) (wire.PrimaryEnd, func()) {
			s, c, err := openRaw(t, addr, "right")
			if err != nil {
				t.Fatal(err)
			}
			return s, func() {
				c.(*net.TCPConn).SetLinger(0) // a reset
				c.Close()
			}
		}},
		{"grpc", func(t *testing.T, addr string) (wire.PrimaryEnd, func()) {
			conn, err := wire.DialGRPC(addr, "right", wire.TLSFiles{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			s, err := replpb.NewReplicationClient(conn).Stream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return s, func() { cancel(); conn.Close() }
		}},
	} {
		t.Run(tr.name, func(t *testing.T) { testReceivedOutliveTheStream(t, tr.open) })
	}
}

func testReceivedOutliveTheStream(t *testing.T, open func(t *testing.T, addr string) (wire.PrimaryEnd, func())) {
	// A heartbeat due whenever the store loop looks: the failed stream
	// shows first there, half the time, with batches still queued.
	b, addr, _ := startBackupHeartbeat(t, time.Millisecond)
	s, breakStream := open(t, addr)
	// Four wait in the receiver's queue and a fifth in its hands: six
	// acked as received, none stored.
	_, release := receivedNotStored(t, s, 7, 6)
	breakStream()
	release()
	deadline := time.Now().Add(5 * time.Second)
	for b.Status().DurableSeq < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := b.Status().DurableSeq; got < 6 {
		t.Fatalf("durable seq %d after the stream failed: batches acked as received were dropped", got)
	}
}

// receivedNotStored opens an ack level memory session of epoch 1 on s and
// holds the backup's store loop once it has stored batch 1; it sends
// batches 2 to last and returns once the backup acked acked of them as
// received. send sends more; release lets the store loop go on.
func receivedNotStored(t *testing.T, s wire.PrimaryEnd, last, acked uint64) (send func(seq uint64), release func()) {
	t.Helper()
	stored1, hold := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	release = func() { released.Do(func() { close(hold) }) }
	testHookAcked = func(*Backup) { once.Do(func() { close(stored1); <-hold }) }
	// Before the backup's Close, which waits for its store loop.
	t.Cleanup(func() { release(); testHookAcked = nil })
	if err := s.Send(&replpb.PrimaryMsg{Msg: &replpb.PrimaryMsg_Hello{Hello: &replpb.Hello{VolumeId: "vol-1", Epoch: 1, AckReceived: true}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Recv(); err != nil || m.GetWelcome() == nil {
		t.Fatalf("hello: %v %v", m, err)
	}
	var prev uint32
	send = func(seq uint64) {
		var msg *replpb.PrimaryMsg
		msg, prev = batch(t, seq, 1, prev, journal.Op{Kind: journal.KindMkdir, Path: fmt.Sprintf("d%d", seq), Mode: 0o755})
		if err := s.Send(msg); err != nil {
			t.Fatal(err)
		}
	}
	send(1)
	<-stored1 // the backup's store loop now waits in the hook
	for seq := uint64(2); seq <= last; seq++ {
		send(seq)
	}
	for received := uint64(0); received < acked; {
		m, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		received = max(received, m.GetAck().GetReceivedSeq())
	}
	return send, release
}

// TestFenceStoresWhatItAckedAsReceived: at ack level memory, batches acked
// as received but still queued when the fence comes are stored before it
// returns (the primary may have counted those acks), and nothing is acked
// as received after it.
func TestFenceStoresWhatItAckedAsReceived(t *testing.T) {
	b, addr, _ := startBackup(t)
	s := dialRaw(t, addr, "right")
	send, release := receivedNotStored(t, s, 4, 4)
	fenced := make(chan error, 1)
	go func() { fenced <- b.Fence(context.Background(), 1) }()
	waitFencing(t, b, 1)
	// The old primary reconnecting now would replace the session whose
	// queue holds what was acked as received: refused.
	if m := hello(t, dialRaw(t, addr, "right"), 1); m.GetReject().GetCode() != replpb.Reject_STALE_EPOCH {
		t.Fatalf("a Hello of the epoch being fenced: %v, want STALE_EPOCH", m)
	}
	release()
	must(t, <-fenced)
	if d := b.Status().DurableSeq; d < 4 {
		t.Fatalf("durable seq %d after the fence: batches acked as received were dropped", d)
	}
	send(5)
	for {
		m, err := s.Recv()
		if err != nil {
			break
		}
		if m.GetAck().GetReceivedSeq() >= 5 || m.GetAck().GetDurableSeq() >= 5 {
			t.Fatalf("a batch was acked after the fence: %v", m)
		}
	}
}
