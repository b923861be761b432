package replicate

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pbfs/pbfs/journal"
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
		t.Fatalf("batch 1 not acked: %v (%s)", err, p.Status()[0].State)
	}
	up(p, reg)
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
			if said := p.Status()[0].State; strings.Contains(said, "over gRPC") != c.grpcOnly {
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
