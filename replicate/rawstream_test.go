package replicate

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// replicateOnce journals one batch on a fresh primary, waits for the
// backup at addr to ack it and calls up with the primary and its registry
// while the stream is still up.
func replicateOnce(t *testing.T, addr string, up func(*Primary, *prometheus.Registry)) {
	t.Helper()
	st := storeWithOneBatch(t)
	reg := prometheus.NewRegistry()
	p, err := StartPrimary(PrimaryConfig{Backups: []string{addr}, Ack: "all", Token: "right", VolumeID: "v", Store: st, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.Wait(ctx, 1); err != nil {
		t.Fatalf("batch 1 not acked: %v (%s)", err, p.shippers[0].describe(1))
	}
	up(p, reg)
}

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

func rawGauge(t *testing.T, reg *prometheus.Registry, addr string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "pbfs_replicate_stream_raw" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == addr {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestPrimaryStreamsRaw: a primary streams to a backup over a raw stream,
// and to a backup from before raw streams over gRPC; both hold the batch.
func TestPrimaryStreamsRaw(t *testing.T) {
	for _, c := range []struct {
		grpcOnly bool
		raw      float64
	}{{false, 1}, {true, 0}} {
		b, addr, _ := startBackupWith(t, c.grpcOnly)
		replicateOnce(t, addr, func(p *Primary, reg *prometheus.Registry) {
			if got := rawGauge(t, reg, addr); got != c.raw {
				t.Errorf("grpcOnly %v: pbfs_replicate_stream_raw %v, want %v", c.grpcOnly, got, c.raw)
			}
			// An operator is told of a backup that streams over gRPC.
			if said := p.shippers[0].describe(0); strings.Contains(said, "over gRPC") != c.grpcOnly {
				t.Errorf("grpcOnly %v: the backup is described as %q", c.grpcOnly, said)
			}
		})
		if got := b.Status().DurableSeq; got != 1 {
			t.Fatalf("grpcOnly %v: backup holds seq %d, want 1", c.grpcOnly, got)
		}
	}
}

// TestRawStreamRefusals: a raw stream with a wrong or no token is refused
// with a Reject that says so and counted; frames that break the format,
// a stream that does not start with Hello and bytes that are neither a raw
// stream nor gRPC end their connection; the backup serves the next
// primary all the same.
func TestRawStreamRefusals(t *testing.T) {
	b, addr, _ := startBackup(t)
	for tok, want := range map[string]string{"wrong": "wrong token", "": "no token"} {
		_, _, err := openRaw(t, addr, tok)
		var refused *wire.Refusal
		if !errors.As(err, &refused) || !strings.Contains(refused.Reject.Reason, want) {
			t.Fatalf("token %q: %v, want a refusal saying %q", tok, err, want)
		}
	}
	var failures dto.Metric
	b.m.authFailures.Write(&failures)
	if got := failures.GetCounter().GetValue(); got != 2 {
		t.Errorf("pbfs_backup_auth_failures_total %v, want 2", got)
	}

	// ended reports whether the backup closed the connection, reading
	// past whatever it sent first (a Reject, say).
	ended := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		return !errors.As(err, &ne) || !ne.Timeout()
	}
	for name, send := range map[string]func(s wire.PrimaryStream, c net.Conn){
		"a frame over the limit": func(_ wire.PrimaryStream, c net.Conn) {
			c.Write(binary.BigEndian.AppendUint32(nil, wire.MaxFrame+1))
		},
		"a frame that is not a message": func(_ wire.PrimaryStream, c net.Conn) {
			c.Write([]byte{0, 0, 0, 3, 0xff, 0xff, 0xff})
		},
		"a batch before Hello": func(s wire.PrimaryStream, _ net.Conn) {
			m, _ := batch(t, 1, 1, 0, journal.Op{Kind: journal.KindCreate, Path: "x", Mode: 0o644})
			s.Send(m)
		},
		"a frame cut short": func(_ wire.PrimaryStream, c net.Conn) {
			c.Write([]byte{0, 0, 1, 0, 1, 2})
			c.(*net.TCPConn).CloseWrite()
		},
	} {
		s, c, err := openRaw(t, addr, "right")
		if err != nil {
			t.Fatal(err)
		}
		send(s, c)
		if !ended(c) {
			t.Errorf("%s: the backup kept the stream open", name)
		}
		c.Close()
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GARBAGE!GARBAGE!GARBAGE!GARBAGE!"))
	if !ended(c) {
		t.Error("neither raw nor gRPC: the backup kept the connection open")
	}
	c.Close()
	if m := hello(t, dialRaw(t, addr, "right"), 1); m.GetWelcome() == nil {
		t.Fatalf("after the refusals: %v, want Welcome", m)
	}
}

// TestBackupCloseEndsRawStreams: closing a backup ends the raw streams it
// serves, and waits for them, before it closes its journal.
func TestBackupCloseEndsRawStreams(t *testing.T) {
	b, addr, _ := startBackup(t)
	s := dialRaw(t, addr, "right")
	if m := hello(t, s, 1); m.GetWelcome() == nil {
		t.Fatalf("hello: %v", m)
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with a raw stream open")
	}
	if m, err := s.Recv(); err == nil {
		t.Fatalf("the stream outlived the backup: %v", m)
	}
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
