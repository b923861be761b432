package replicate

import (
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// storeWithOneBatch is a primary's journal holding batch 1, closed at
// cleanup.
func storeWithOneBatch(t *testing.T) *journal.Store {
	t.Helper()
	st, err := journal.OpenStore(filepath.Join(t.TempDir(), "pj"), journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, _, err := st.Append([]journal.Op{{Kind: journal.KindCreate, Path: "f", Mode: 0o644}}, time.Now(), 0, false); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSilentBackupEndsRawStream: a backup that acks every heartbeat keeps
// its raw stream up with nothing to send; one that goes silent (its
// process stopped, its kernel still answering TCP) is marked unreachable
// after rawSilence, as gRPC's keepalive did.
func TestSilentBackupEndsRawStream(t *testing.T) {
	// Restored once everything below has stopped (cleanups run last first).
	t.Cleanup(func(h, s time.Duration) func() {
		return func() { heartbeatEvery, rawSilence = h, s }
	}(heartbeatEvery, rawSilence))
	heartbeatEvery, rawSilence = 50*time.Millisecond, time.Second

	_, addr, _ := startBackup(t)
	st, err := journal.OpenStore(filepath.Join(t.TempDir(), "pj"), journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// A backup that opens the stream and then says nothing more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			io.ReadFull(c, make([]byte, len(wire.Magic)))
			s, err := wire.Accept(c, nil, "right", func(string) {})
			if err != nil {
				return
			}
			s.Recv() // the Hello
			s.Send(&replpb.BackupMsg{Msg: &replpb.BackupMsg_Welcome{Welcome: &replpb.Welcome{VolumeId: "v"}}})
		}
	}()

	p, err := StartPrimary(PrimaryConfig{Backups: []string{addr, ln.Addr().String()}, Ack: "all", Token: "right", VolumeID: "v", Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	live, silent := p.shippers[0], p.shippers[1]
	deadline := time.Now().Add(10 * time.Second)
	for !live.up.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// The live one stays up throughout (a stream that ended would be down
	// for its redial's 50 ms backoff at least), past twice the silence
	// limit and until the silent one is found out.
	up := time.Now()
	for time.Since(up) < 2*rawSilence || !strings.Contains(silent.describe(0), "no word from the backup") {
		if time.Now().After(deadline) {
			t.Fatalf("a silent backup: %q, want it unreachable", silent.describe(0))
		}
		if !live.up.Load() {
			t.Fatalf("a backup that heartbeats went down: %q", live.describe(0))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
