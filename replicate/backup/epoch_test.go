package backup

import (
	"context"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// refusedFor checks that m refuses a Hello without deposing its primary
// (not STALE_EPOCH), for a reason that says want.
func refusedFor(t *testing.T, m *replpb.BackupMsg, want string) {
	t.Helper()
	rej := m.GetReject()
	if rej == nil || rej.Code == replpb.Reject_STALE_EPOCH || !strings.Contains(rej.Reason, want) {
		t.Fatalf("%v: want a refusal that does not depose the primary, saying %q", m, want)
	}
}

// resyncStart opens a resync of epoch and returns the backup's first
// answer.
func resyncStart(t *testing.T, addr string, epoch uint64) error {
	t.Helper()
	conn, err := wire.DialGRPC(addr, "right", wire.TLSFiles{})
	must(t, err)
	defer conn.Close()
	rs, err := replpb.NewReplicationClient(conn).Resync(context.Background())
	must(t, err)
	must(t, rs.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Start{Start: &replpb.ResyncStart{VolumeId: "vol-1", Epoch: epoch, BlockSize: 4096}}}))
	_, err = rs.Recv()
	return err
}

// TestHelloEpochOutOfRangeIsRefused: a token holder's Hello (or resync)
// of epoch 2^64-1, or of wire.MaxEpoch, is refused and never stored; the
// primary of the backup's epoch is served as before.
func TestHelloEpochOutOfRangeIsRefused(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			b, addr, _ := startBackup(t)
			if m := hello(t, tr.dial(t, addr, "right"), 5); m.GetWelcome() == nil {
				t.Fatalf("epoch 5: %v", m)
			}
			for _, e := range []uint64{math.MaxUint64, wire.MaxEpoch} {
				refusedFor(t, hello(t, tr.dial(t, addr, "right"), e), "out of range")
				if err := resyncStart(t, addr, e); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "out of range") {
					t.Fatalf("a resync of epoch %d: %v, want FailedPrecondition, out of range", e, err)
				}
				if got := b.Status().Epoch; got != 5 {
					t.Fatalf("epoch %d after a Hello of %d, want 5", got, e)
				}
			}
			if m := hello(t, tr.dial(t, addr, "right"), 5); m.GetWelcome() == nil {
				t.Fatalf("epoch 5 after the refusals: %v", m)
			}
		})
	}
}

// TestHelloEpochJumpIsBounded: a Hello may raise the backup's epoch by at
// most MaxEpochStep, unless the operator accepted that epoch.
func TestHelloEpochJumpIsBounded(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			b, addr, _ := startBackup(t)
			hello(t, tr.dial(t, addr, "right"), 5)
			far := uint64(5 + MaxEpochStep + 1)
			refusedFor(t, hello(t, tr.dial(t, addr, "right"), far), "--accept-epoch 65542")
			if err := resyncStart(t, addr, far); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("a resync of epoch %d: %v, want FailedPrecondition", far, err)
			}
			if got := b.Status().Epoch; got != 5 {
				t.Fatalf("epoch %d after a Hello of %d, want 5", got, far)
			}
			if m := hello(t, tr.dial(t, addr, "right"), far-1); m.GetWelcome() == nil {
				t.Fatalf("epoch %d, a step of %d: %v", far-1, MaxEpochStep, m)
			}
			_, addr, _ = startBackupOpts(t, false, func(c *Config) { c.AcceptEpoch = 1 << 40 })
			if m := hello(t, tr.dial(t, addr, "right"), 1<<40); m.GetWelcome() == nil {
				t.Fatalf("epoch 2^40, accepted by the operator: %v", m)
			}
		})
	}
}

// TestHelloEpochNotIssuedIsRefused: with an EpochIssued hook (pbfs node's
// term records), an epoch it does not vouch for is refused however small
// the step; one it does is admitted however large.
func TestHelloEpochNotIssuedIsRefused(t *testing.T) {
	issued := map[uint64]bool{3: true, 1 << 40: true}
	b, addr, _ := startBackupOpts(t, false, func(c *Config) {
		c.EpochIssued = func(_ context.Context, e uint64) error {
			if issued[e] {
				return nil
			}
			return ErrEpochNotIssued
		}
	})
	if m := hello(t, dialRaw(t, addr, "right"), 3); m.GetWelcome() == nil {
		t.Fatalf("epoch 3, issued: %v", m)
	}
	refusedFor(t, hello(t, dialRaw(t, addr, "right"), 4), "only a primary the coordinator elected")
	if m := hello(t, dialRaw(t, addr, "right"), 1<<40); m.GetWelcome() == nil {
		t.Fatalf("epoch 2^40, issued: %v", m)
	}
	if got := b.Status().Epoch; got != 1<<40 {
		t.Fatalf("epoch %d, want 2^40", got)
	}
}

// TestRepairEpoch: a journal that holds an epoch no term can take (an
// earlier version stored it from a Hello) refuses every primary without
// deposing it, naming --repair-epoch; opened with RepairEpoch it holds that
// epoch, and serves its primary again.
func TestRepairEpoch(t *testing.T) {
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	must(t, os.Mkdir(vol, 0o755))
	st, err := journal.OpenStore(jdir, journal.StoreOptions{})
	must(t, err)
	must(t, st.SetEpoch(math.MaxUint64))
	must(t, st.Close())
	cfg := Config{Volume: vol, Journal: jdir, Token: "right"}
	b, addr := serveAt(t, cfg)
	refusedFor(t, hello(t, dialRaw(t, addr, "right"), 3), "--repair-epoch")
	must(t, b.Close())
	cfg.RepairEpoch = 3
	b, addr = serveAt(t, cfg)
	if got := b.Status().Epoch; got != 3 {
		t.Fatalf("epoch %d after the repair, want 3", got)
	}
	if m := hello(t, dialRaw(t, addr, "right"), 3); m.GetWelcome() == nil {
		t.Fatalf("epoch 3 after the repair: %v", m)
	}
	if m := hello(t, dialRaw(t, addr, "right"), 2); m.GetReject().GetCode() != replpb.Reject_STALE_EPOCH {
		t.Fatalf("epoch 2 after the repair to 3: %v, want STALE_EPOCH", m)
	}
	must(t, b.Close())
	cfg.RepairEpoch = 1 // in range now: left alone
	b, _ = serveAt(t, cfg)
	if got := b.Status().Epoch; got != 3 {
		t.Fatalf("epoch %d after a repair of an epoch in range, want 3", got)
	}
}

// serveAt opens a backup with cfg and serves it on a loopback port.
func serveAt(t *testing.T, cfg Config) (*Backup, string) {
	t.Helper()
	b, err := Open(cfg)
	must(t, err)
	t.Cleanup(func() { b.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go b.Serve(ln)
	return b, ln.Addr().String()
}
