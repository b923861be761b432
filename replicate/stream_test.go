package replicate

import (
	"testing"
	"time"

	"github.com/pbfs/pbfs/journal"
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
