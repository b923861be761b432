package primary

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

// TestSilentBackupEndsRawStream: a backup that acks every heartbeat keeps
// its raw stream up with nothing to send; one that goes silent (its
// process stopped, its kernel still answering TCP) is marked unreachable
// after rawSilence, as gRPC's keepalive did. That a backup does ack every
// heartbeat is TestBackupAcksEveryHeartbeat's.
func TestSilentBackupEndsRawStream(t *testing.T) {
	// Restored once everything below has stopped (cleanups run last first).
	silence := rawSilence
	t.Cleanup(func() { rawSilence = silence })
	rawSilence = time.Second

	st, err := journal.OpenStore(filepath.Join(t.TempDir(), "pj"), journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	addrs := []string{fakeBackup(t, 50*time.Millisecond), fakeBackup(t, 0)}
	p, err := Start(Config{Backups: addrs, Ack: "all", Token: "right", VolumeID: "v", Store: st})
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

// fakeBackup serves raw streams on a loopback port as a backup holding
// nothing would: it welcomes each primary, then acks with nothing new
// every beat; with beat 0 it says nothing more (its process stopped, its
// kernel still answering TCP). Its streams end at cleanup.
func fakeBackup(t *testing.T, beat time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); close(done) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go fakeBackupStream(c, beat, done)
		}
	}()
	return ln.Addr().String()
}

func fakeBackupStream(c net.Conn, beat time.Duration, done <-chan struct{}) {
	defer c.Close()
	io.ReadFull(c, make([]byte, len(wire.Magic)))
	s, err := wire.Accept(c, nil, "right", func(string) {})
	if err != nil {
		return
	}
	s.Recv() // the Hello
	s.Send(&replpb.BackupMsg{Msg: &replpb.BackupMsg_Welcome{Welcome: &replpb.Welcome{VolumeId: "v"}}})
	var heartbeat <-chan time.Time
	if beat > 0 {
		tick := time.NewTicker(beat)
		defer tick.Stop()
		heartbeat = tick.C
	}
	for {
		select {
		case <-done:
			return
		case <-heartbeat:
			if s.Send(&replpb.BackupMsg{Msg: &replpb.BackupMsg_Ack{Ack: &replpb.Ack{}}}) != nil {
				return
			}
		}
	}
}
