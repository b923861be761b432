package backup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

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
func welcomed(t *testing.T, dial func(t *testing.T, addr, token string) wire.PrimaryEnd) (*Backup, wire.PrimaryEnd) {
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

// TestBackupAcksEveryHeartbeat: with nothing to store, a backup acks on
// every heartbeat, the word by which a raw stream's primary knows it is
// alive (the primary's side: TestSilentBackupEndsRawStream).
func TestBackupAcksEveryHeartbeat(t *testing.T) {
	_, addr, _ := startBackupHeartbeat(t, 50*time.Millisecond)
	s := dialRaw(t, addr, "right")
	if m := hello(t, s, 1); m.GetWelcome() == nil {
		t.Fatalf("hello: %v", m)
	}
	start := time.Now()
	for n := range 10 {
		if m, err := s.Recv(); err != nil || m.GetAck() == nil {
			t.Fatalf("heartbeat %d: %v, %v", n, m, err)
		}
	}
	// At the default heartbeat, ten acks would take most of a minute.
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("ten heartbeats took %v", took)
	}
}
