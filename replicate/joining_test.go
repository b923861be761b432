package replicate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/replicate/internal/repltest"

	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/primary"
	"github.com/pbfs/pbfs/replicate/wire"
)

// A primary whose only backups are still joining (added while it runs, as
// pbfs node adds members, and not caught up) acknowledges nothing on its
// own disk: the barrier waits for the first of them to catch up. It was
// acknowledged at once before, and lost with the primary.
func TestBarrierWaitsForAJoiningBackup(t *testing.T) {
	p, err := primary.Start(primary.Config{Ack: "all", Token: "right", VolumeID: "v", Store: repltest.StoreWithOneBatch(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addr := repltest.UnusedAddr(t) // a backup that answers nothing yet
	if err := p.AddBackup(addr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if n, err := p.Wait(ctx, 1); err == nil {
		t.Fatalf("barrier acknowledged by %d backups while the only one was joining and down", n)
	}
	// The backup comes up at that address and catches up: the barrier
	// returns, held by it.
	repltest.ServeBackup(t, addr)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	if n, err := p.Wait(ctx2, 1); err != nil || n != 1 {
		t.Fatalf("after the backup came up: %d acks, %v", n, err)
	}
}

// With MinBackups, a primary with no backup yet (pbfs node elected while
// the other members were down) acknowledges nothing on its own disk; the
// barrier returns once a backup joined and holds the batch.
func TestMinBackupsHoldsBarriersUntilABackupJoins(t *testing.T) {
	p, err := primary.Start(primary.Config{Ack: "all", Token: "right", VolumeID: "v", Store: repltest.StoreWithOneBatch(t), MinBackups: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if n, err := p.Wait(ctx, 1); err == nil || !strings.Contains(err.Error(), "--min-backups 1") {
		t.Fatalf("barrier with no backup and MinBackups 1: %d acks, %v", n, err)
	}
	if s := p.AckSummary(); s != "1 of the 0 backups in the ack set (--ack all, --min-backups 1): barriers wait until more backups join" {
		t.Fatalf("ack summary with no backup: %q", s)
	}
	_, bl := repltest.ServeBackup(t, "127.0.0.1:0")
	if err := p.AddBackup(bl.Addr().String()); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	if n, err := p.Wait(ctx2, 1); err != nil || n != 1 {
		t.Fatalf("after a backup joined: %d acks, %v", n, err)
	}
	if s := p.AckSummary(); s != "1 of the 1 backups in the ack set (--ack all, --min-backups 1)" {
		t.Fatalf("ack summary with a backup: %q", s)
	}
}

// A joining backup that holds everything the journal has enters the ack
// set at once, with no barrier to notice: an idle primary's status said
// "joining" for a backup that had long caught up.
func TestCaughtUpBackupJoinsWithoutABarrier(t *testing.T) {
	p, err := primary.Start(primary.Config{Ack: "all", Token: "right", VolumeID: "v", Store: repltest.StoreWithOneBatch(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, bl := repltest.ServeBackup(t, "127.0.0.1:0")
	if err := p.AddBackup(bl.Addr().String()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st := p.Status()
		if len(st) == 1 && st[0].AckedSeq >= 1 && !st[0].Stale {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backup holds the journal but is still out of the ack set: %+v", st)
		}
	}
}

// When a backup joins, the ones already in the ack set are told the new
// policy at once (a new session), not only at their next reconnect.
func TestJoinTellsTheOthersTheNewPolicy(t *testing.T) {
	b1, l1 := repltest.ServeBackup(t, "127.0.0.1:0")
	p, err := primary.Start(primary.Config{Ack: "majority", Token: "right", VolumeID: "v", Store: repltest.StoreWithOneBatch(t), Dynamic: true,
		Backups: []string{l1.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitPolicy := func(b *backup.Backup, want wire.AckPolicy) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); b.Status().Policy != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the backup holds %+v, want %+v", b.Status().Policy, want)
			}
		}
	}
	waitPolicy(b1, wire.AckPolicy{Need: 1, Of: 1})
	b2, l2 := repltest.ServeBackup(t, "127.0.0.1:0")
	if err := p.AddBackup(l2.Addr().String()); err != nil {
		t.Fatal(err)
	}
	waitPolicy(b1, wire.AckPolicy{Need: 1, Of: 2})
	waitPolicy(b2, wire.AckPolicy{Need: 1, Of: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := p.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

// A mount's fixed backups are taken to hold the policy its flags give:
// one down from the start does not hold a majority's barriers.
func TestFixedBackupDownFromTheStartHoldsNoMajority(t *testing.T) {
	_, live := repltest.ServeBackup(t, "127.0.0.1:0")
	dead := repltest.UnusedAddr(t)
	p, err := primary.Start(primary.Config{Ack: "majority", Token: "right", VolumeID: "v", Store: repltest.StoreWithOneBatch(t),
		Backups: []string{live.Addr().String(), dead}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if n, err := p.Wait(ctx, 1); err != nil || n != 1 {
		t.Fatalf("a majority of two with one down: %d acks, %v", n, err)
	}
}

// A node's backup that has not answered since its term began may hold
// {1 of 1} from the last: a barrier on the other backup alone waits, and
// says why, until it has been told the current policy.
func TestBarrierWaitsForABackupThatMayHoldAnOldPolicy(t *testing.T) {
	_, live := repltest.ServeBackup(t, "127.0.0.1:0")
	p, err := primary.Start(primary.Config{Ack: "majority", Token: "right", VolumeID: "v", Store: repltest.StoreWithOneBatch(t), Dynamic: true,
		Backups: []string{live.Addr().String(), repltest.UnusedAddr(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if n, err := p.Wait(ctx, 1); err == nil || !strings.Contains(err.Error(), "holds an ack policy by which it could be elected without it") {
		t.Fatalf("a barrier held by one of two backups, the other silent since the term began: %d acks, %v", n, err)
	}
}
