package backup

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// TestFenceEndsTheTerm: a backup fenced at epoch 5 stores nothing more of
// the epoch-5 session it was serving, refuses that primary's Hello again,
// admits epoch 6, and keeps the fence across a restart.
func TestFenceEndsTheTerm(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			b, addr, _ := startBackup(t)
			s := tr.dial(t, addr, "right")
			if m := hello(t, s, 5); m.GetWelcome() == nil {
				t.Fatalf("epoch 5: %v", m)
			}
			msg, prev := batch(t, 1, 5, 0, journal.Op{Kind: journal.KindMkdir, Path: "before", Mode: 0o755})
			must(t, s.Send(msg))
			waitDurable(t, s, 1)
			must(t, b.Fence(context.Background(), 5))
			if st := b.Status(); st.Fenced != 5 || st.DurableSeq != 1 {
				t.Fatalf("after the fence: %+v", st)
			}
			msg, _ = batch(t, 2, 5, prev, journal.Op{Kind: journal.KindMkdir, Path: "after", Mode: 0o755})
			s.Send(msg)
			for {
				m, err := s.Recv()
				if err != nil || m.GetReject() != nil {
					break // the session ended, or refused the batch
				}
				if m.GetAck().GetDurableSeq() >= 2 {
					t.Fatalf("a batch of the fenced epoch was acked: %v", m)
				}
			}
			if d := b.Status().DurableSeq; d != 1 {
				t.Fatalf("durable seq %d: a batch of the fenced epoch was stored", d)
			}
			if m := hello(t, tr.dial(t, addr, "right"), 5); m.GetReject().GetCode() != replpb.Reject_STALE_EPOCH {
				t.Fatalf("epoch 5 after its fence: %v, want STALE_EPOCH", m)
			}
			if m := hello(t, tr.dial(t, addr, "right"), 6); m.GetWelcome() == nil {
				t.Fatalf("epoch 6 after a fence at 5: %v", m)
			}
			must(t, b.Fence(context.Background(), 3)) // below: nothing
			if f := b.Status().Fenced; f != 5 {
				t.Fatalf("fenced %d after fencing a lower epoch", f)
			}
		})
	}
}

// TestFenceSurvivesARestart: the fence is in the journal.
func TestFenceSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	must(t, os.Mkdir(vol, 0o755))
	cfg := Config{Volume: vol, Journal: filepath.Join(dir, "j"), Token: "right"}
	b, err := Open(cfg)
	must(t, err)
	must(t, b.Fence(context.Background(), 7))
	b.Close()
	b, err = Open(cfg)
	must(t, err)
	defer b.Close()
	if !b.fencedOut(7) || b.fencedOut(8) || b.Status().Fenced != 7 {
		t.Fatalf("after a restart: fenced %d", b.Status().Fenced)
	}
}

// waitFencing waits until a Fence of epoch has begun.
func waitFencing(t *testing.T, b *Backup, epoch uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); b.fenceFloor() < epoch; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fence never began")
		}
	}
}

// TestFenceEndsAResyncUnderWay: a resync of the fenced epoch that began
// before the fence goes no further: its end would reset the journal to
// the old primary's snapshot after the backup reported, and could land
// after the new primary's own resync.
func TestFenceEndsAResyncUnderWay(t *testing.T) {
	b, addr, _ := startBackup(t)
	s := dialRaw(t, addr, "right")
	hello(t, s, 1)
	msg, _ := batch(t, 1, 1, 0, journal.Op{Kind: journal.KindMkdir, Path: "d", Mode: 0o755})
	must(t, s.Send(msg))
	waitDurable(t, s, 1)
	conn, err := wire.DialGRPC(addr, "right", wire.TLSFiles{})
	must(t, err)
	defer conn.Close()
	rs, err := replpb.NewReplicationClient(conn).Resync(context.Background())
	must(t, err)
	must(t, rs.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Start{Start: &replpb.ResyncStart{VolumeId: "vol-1", Epoch: 1, BlockSize: 4096}}}))
	must(t, rs.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Entry{Entry: &replpb.Entry{Path: []byte("f"), Mode: 0o100644}}}))
	if m, err := rs.Recv(); err != nil || m.GetWant() == nil {
		t.Fatalf("the resync did not begin: %v %v", m, err)
	}
	must(t, b.Fence(context.Background(), 1))
	must(t, rs.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Done{Done: &replpb.ResyncDone{}}}))
	if m, err := rs.Recv(); err == nil {
		t.Fatalf("a resync of the fenced epoch went on: %v", m)
	}
	if st := b.Status(); st.DurableSeq != 1 || !st.Stalled {
		t.Fatalf("a resync of the fenced epoch ended after the fence: %+v", st)
	}
	// And a new one of that epoch is refused from the start.
	rs, err = replpb.NewReplicationClient(conn).Resync(context.Background())
	must(t, err)
	rs.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Start{Start: &replpb.ResyncStart{VolumeId: "vol-1", Epoch: 1, BlockSize: 4096}}})
	if _, err := rs.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a resync of the fenced epoch: %v, want PermissionDenied", err)
	}
}

// waitDurable reads acks until one says seq is durable.
func waitDurable(t *testing.T, s wire.PrimaryEnd, seq uint64) {
	t.Helper()
	for {
		m, err := s.Recv()
		if err != nil {
			t.Fatalf("waiting for seq %d to be durable: %v", seq, err)
		}
		if m.GetAck().GetDurableSeq() >= seq {
			return
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
