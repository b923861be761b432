package replicate

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
)

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

// TestIncompleteGroupIsNotApplied: a seal stored as a group of batches is
// applied only once the backup holds its last batch; until then the volume
// keeps the state before the group, one the primary had.
func TestIncompleteGroupIsNotApplied(t *testing.T) {
	b, addr, vol := startBackup(t)
	s := dial(t, addr, "right")
	if m := hello(t, s, 1); m.GetWelcome() == nil {
		t.Fatalf("hello: %v", m)
	}
	send := func(seq uint64, prev uint32, more bool, ops ...journal.Op) uint32 {
		enc, h, err := journal.Encode(&journal.Batch{Seq: seq, Epoch: 1, Prev: prev, More: more, Ops: ops})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&replpb.PrimaryMsg{Msg: &replpb.PrimaryMsg_Batch{Batch: &replpb.Batch{Seq: seq, Encoded: enc}}}); err != nil {
			t.Fatal(err)
		}
		return h.Checksum
	}
	waitDurable := func(seq uint64) {
		for deadline := time.Now().Add(5 * time.Second); b.Status().DurableSeq < seq; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("batch %d never became durable", seq)
			}
		}
	}
	c := send(1, 0, false, journal.Op{Kind: journal.KindMkdir, Path: "d", Mode: 0o755})
	c = send(2, c, true, journal.Op{Kind: journal.KindCreate, Path: "d/f", Mode: 0o644})
	waitDurable(2)
	time.Sleep(300 * time.Millisecond) // the apply loop runs every 100 ms
	if got := b.Status().AppliedSeq; got != 1 {
		t.Fatalf("applied seq %d with the group 2.. incomplete, want 1", got)
	}
	if _, err := os.Stat(filepath.Join(vol, "d", "f")); !os.IsNotExist(err) {
		t.Fatalf("the first batch of an incomplete group was applied: %v", err)
	}
	send(3, c, false, journal.Op{Kind: journal.KindWrite, Path: "d/f", Data: []byte("whole")})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.WaitApplied(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(vol, "d", "f")); err != nil || string(data) != "whole" {
		t.Fatalf("after the group: %q %v", data, err)
	}
}

// welcomed starts a backup and opens a stream to it with dial, past its
// Welcome.
func welcomed(t *testing.T, dial func(t *testing.T, addr, token string) primaryStream) (*Backup, primaryStream) {
	t.Helper()
	b, addr, _ := startBackup(t)
	s := dial(t, addr, "right")
	if m := hello(t, s, 1); m.GetWelcome() == nil {
		t.Fatalf("hello: %v", m)
	}
	return b, s
}

// TestOneAckPerBatch: a primary that waits for each batch's ack before it
// sends the next (a closed loop of barriers) gets one ack per batch, the
// apply progress riding on the next batch's ack, and the last batch's
// apply is still reported on its own within appliedAckDelay.
func TestOneAckPerBatch(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			_, s := welcomed(t, tr.dial)
			const n = 40
			acks := 0
			var prev uint32
			var last *replpb.Ack
			for seq := uint64(1); seq <= n; seq++ {
				var msg *replpb.PrimaryMsg
				msg, prev = batch(t, seq, 1, prev, journal.Op{Kind: journal.KindMkdir, Path: fmt.Sprintf("d%d", seq), Mode: 0o755})
				if err := s.Send(msg); err != nil {
					t.Fatal(err)
				}
				for last == nil || last.DurableSeq < seq {
					m, err := s.Recv()
					if err != nil || m.GetAck() == nil {
						t.Fatalf("batch %d: %v %v", seq, m, err)
					}
					acks++
					last = m.GetAck()
				}
			}
			start := time.Now()
			for last.AppliedSeq < n {
				m, err := s.Recv()
				if err != nil || m.GetAck() == nil {
					t.Fatalf("waiting for batch %d to be reported applied: %v %v", n, m, err)
				}
				acks++
				last = m.GetAck()
			}
			if waited := time.Since(start); waited > time.Second {
				t.Errorf("the last apply was reported after %v", waited)
			}
			if acks > n+2 {
				t.Errorf("%d acks for %d batches, want about one each", acks, n)
			}
		})
	}
}

// TestStallIsReportedAtOnce: a batch the backup cannot apply stalls it,
// and the primary hears so at once, not at the next heartbeat.
func TestStallIsReportedAtOnce(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			_, s := welcomed(t, tr.dial)
			msg, _ := batch(t, 1, 1, 0, journal.Op{Kind: journal.KindRename, Path: "missing", Path2: "other"})
			start := time.Now()
			if err := s.Send(msg); err != nil {
				t.Fatal(err)
			}
			for {
				m, err := s.Recv()
				if err != nil {
					t.Fatalf("stream ended before the stall was reported: %v", err)
				}
				if m.GetAck().GetStalled() {
					break
				}
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("the stall was reported after %v", took)
			}
		})
	}
}

// TestReceivedBatchesOutliveTheStream: at ack level memory, batches the
// backup acked as received are stored even when the stream fails before
// it got to them (the primary may have counted the acks and died).
func TestReceivedBatchesOutliveTheStream(t *testing.T) {
	for _, tr := range []struct {
		name string
		// open returns a stream and a way to break it as a dead primary would.
		open func(t *testing.T, addr string) (primaryStream, func())
	}{
		{"raw", func(t *testing.T, addr string) (primaryStream, func()) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			t.Cleanup(cancel)
			d := rawDialer{addr: addr, token: "right", silence: rawSilence}
			fc, err := d.dial(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return rawPrimaryStream{fc, d.silence}, func() {
				fc.c.(*net.TCPConn).SetLinger(0) // a reset
				fc.c.Close()
			}
		}},
		{"grpc", func(t *testing.T, addr string) (primaryStream, func()) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithPerRPCCredentials(tokenCreds{token: "right"}))
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

func testReceivedOutliveTheStream(t *testing.T, open func(t *testing.T, addr string) (primaryStream, func())) {
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
func receivedNotStored(t *testing.T, s primaryStream, last, acked uint64) (send func(seq uint64), release func()) {
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
