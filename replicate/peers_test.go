package replicate

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
	b, addr, _ := startBackupOpts(t, false, heartbeatEvery, func(c *BackupConfig) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	openings := []string{"", rawMagic, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"}
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
// a Hello, at most maxHelloFrame: a larger one ends the connection
// before it is read.
func TestRawOpeningIsBounded(t *testing.T) {
	_, addr, _ := startBackup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fc, err := rawDialer{addr: addr, token: "right"}.dial(ctx)
	must(t, err)
	defer fc.c.Close()
	fc.c.Write(binary.BigEndian.AppendUint32(nil, maxHelloFrame+1))
	fc.c.Write(make([]byte, 64<<10))
	if !closedBy(fc.c, 5*time.Second) {
		t.Fatal("the backup read on into a first frame larger than a Hello")
	}
}

// TestCallsOfAKindAreBounded: the backup serves at most callsAtOnce calls
// of a kind at once, refusing more with ResourceExhausted before reading
// them, and serves the next once one ends.
func TestCallsOfAKindAreBounded(t *testing.T) {
	_, addr, _ := startBackup(t)
	conn, err := dialBackup(addr, "right", TLSFiles{})
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

// TestTokenFrameIsReadAlone: a raw stream's opening reads the token
// frame and not a byte past it before the token is checked; what the
// peer sent after it is still unread when a wrong token is refused.
func TestTokenFrameIsReadAlone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	after := bytes.Repeat([]byte("after the token "), 64)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		io.ReadFull(c, make([]byte, len(rawMagic)))
		c.Write(append(append(binary.BigEndian.AppendUint32(nil, 5), "wrong"...), after...)) // one segment

		io.Copy(io.Discard, c)
	}()
	c, err := ln.Accept()
	must(t, err)
	defer c.Close()
	if _, err := acceptRaw(c, nil, "right", func(string) {}); err == nil {
		t.Fatal("a wrong token was taken")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(after))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, after) {
		t.Fatalf("what followed the token frame: %q, %v; the opening read past the token frame", got, err)
	}
}
