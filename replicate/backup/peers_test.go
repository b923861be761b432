package backup

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// logBuffer collects a backup's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count returns how many lines say s.
func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// closedBy reports whether the backup closed c within d (it read EOF or
// a reset; c sent nothing that could be answered).
func closedBy(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// TestUnauthenticatedConnectionsAreBounded: of 100 connections that never
// show the token (silent, a raw stream's magic alone, gRPC's preface
// alone), the backup holds at most 64 at once, closing the oldest, and
// closes every one within authWithin; a primary connects and is served
// meanwhile; each kind of closing is logged once, with a count later.
func TestUnauthenticatedConnectionsAreBounded(t *testing.T) {
	logs := &logBuffer{}
	b, addr, _ := startBackupOpts(t, false, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	openings := []string{"", wire.Magic, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"}
	var conns []net.Conn
	for i := range 100 {
		c, err := net.Dial("tcp", addr)
		must(t, err)
		defer c.Close()
		_, err = io.WriteString(c, openings[i%len(openings)])
		must(t, err)
		conns = append(conns, c)
	}
	// Accepted (the gauge says so once they are), before the primary's.
	for deadline := time.Now().Add(2 * time.Second); gauge(b.m.conns.WithLabelValues("unauthenticated")) < maxUnauthenticated && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if m := hello(t, dialRaw(t, addr, "right"), 1); m.GetWelcome() == nil {
		t.Fatalf("a primary among 100 connections without the token: %v", m)
	}
	// The 37 oldest made room for the others and the primary's.
	evicted := 0
	for _, c := range conns[:37] {
		if closedBy(c, 100*time.Millisecond) {
			evicted++
		}
	}
	if evicted != 37 {
		t.Fatalf("%d of the 37 oldest connections closed to make room, want all", evicted)
	}
	for i, c := range conns[37:] {
		if !closedBy(c, authWithin+2*time.Second) {
			t.Fatalf("connection %d still open %v after it was accepted", 37+i, authWithin)
		}
	}
	unauth, authed := gauge(b.m.conns.WithLabelValues("unauthenticated")), gauge(b.m.conns.WithLabelValues("authenticated"))
	if unauth != 0 || authed != 1 {
		t.Fatalf("pbfs_backup_connections: %v unauthenticated, %v authenticated; want 0 and 1 (the primary)", unauth, authed)
	}
	for reason, want := range map[string]float64{closedUnauthLimit: 37, closedAuthTimeout: 63} {
		// Counted just after the close the client saw.
		var m dto.Metric
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			b.m.connsClosed.WithLabelValues(reason).Write(&m)
			if m.GetCounter().GetValue() >= want || time.Now().After(deadline) {
				break
			}
		}
		if got := m.GetCounter().GetValue(); got != want {
			t.Errorf("pbfs_backup_connections_closed_total{reason=%q} %v, want %v", reason, got, want)
		}
		if n := logs.count(closedWords[reason]); n != 1 {
			t.Errorf("%d log lines %q, want 1 for the flood", n, closedWords[reason])
		}
	}
}

func gauge(g prometheus.Gauge) float64 {
	var m dto.Metric
	g.Write(&m)
	return m.GetGauge().GetValue()
}

// TestRawOpeningIsBounded: after the token, a raw stream's first frame is
// a Hello, at most wire.MaxHelloFrame: a larger one ends the connection
// before it is read.
func TestRawOpeningIsBounded(t *testing.T) {
	_, addr, _ := startBackup(t)
	_, c, err := openRaw(t, addr, "right")
	must(t, err)
	c.Write(binary.BigEndian.AppendUint32(nil, wire.MaxHelloFrame+1))
	c.Write(make([]byte, 64<<10))
	if !closedBy(c, 5*time.Second) {
		t.Fatal("the backup read on into a first frame larger than a Hello")
	}
}

// TestCallsOfAKindAreBounded: the backup serves at most callsAtOnce calls
// of a kind at once, refusing more with ResourceExhausted before reading
// them, and serves the next once one ends.
func TestCallsOfAKindAreBounded(t *testing.T) {
	_, addr, _ := startBackup(t)
	conn, err := wire.DialGRPC(addr, "right", wire.TLSFiles{})
	must(t, err)
	defer conn.Close()
	open := func() (replpb.Replication_StreamClient, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := replpb.NewReplicationClient(conn).Stream(ctx)
		must(t, err)
		return s, cancel
	}
	var ends []context.CancelFunc
	for range callsAtOnce[replpb.Replication_Stream_FullMethodName] {
		_, end := open() // held, saying nothing
		defer end()
		ends = append(ends, end)
	}
	s, end := open()
	defer end()
	if _, err := s.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("one stream more than callsAtOnce: %v, want ResourceExhausted", err)
	}
	ends[0]()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s, end := open()
		defer end()
		s.Send(&replpb.PrimaryMsg{Msg: &replpb.PrimaryMsg_Hello{Hello: &replpb.Hello{VolumeId: "vol-1", Epoch: 1}}})
		m, err := s.Recv()
		if m.GetWelcome() != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stream served after one ended: %v %v", m, err)
		}
	}
}
