package backup

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/wire"
)

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
