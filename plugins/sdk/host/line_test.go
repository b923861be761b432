package host

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

// lineHost answers barriers with increasing seqs, or fails them, or holds
// them until their context ends.
type lineHost struct {
	seq   atomic.Uint64
	fail  error
	block bool
}

func (h *lineHost) Barrier(ctx context.Context) (uint64, error) {
	if h.block {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	if h.fail != nil {
		return 0, h.fail
	}
	return h.seq.Add(1), nil
}

func (h *lineHost) Status(context.Context) (sdk.Status, error) { return sdk.Status{}, nil }

// startLine serves a line and returns the plugin's end, raw.
func startLine(t *testing.T) (*line, *net.UnixConn) {
	t.Helper()
	hostConn, conn, err := wire.LineConns()
	if err != nil {
		t.Fatal(err)
	}
	l := newLine(hostConn, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { l.close(); conn.Close() })
	return l, conn
}

// ask sends requests for ids and reads as many replies, by id.
func ask(t *testing.T, conn *net.UnixConn, ids ...uint64) map[uint64]wire.LineReply {
	t.Helper()
	for _, id := range ids {
		if _, err := conn.Write(wire.AppendRequest(nil, id, wire.LineBarrier)); err != nil {
			t.Fatal(err)
		}
	}
	out := map[uint64]wire.LineReply{}
	buf := make([]byte, wire.MaxLinePacket)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(out) < len(ids) {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		r, err := wire.ParseReply(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		out[r.ID] = r
	}
	return out
}

func TestLineAnswersWithTheRunningHost(t *testing.T) {
	l, conn := startLine(t)
	if r := ask(t, conn, 1)[1]; r.Code != wire.LineNoHost {
		t.Fatalf("before the frontend started: %+v, want LineNoHost", r)
	}
	h := &lineHost{}
	l.serveHost(h)
	var ids []uint64
	for i := uint64(10); i < 60; i++ {
		ids = append(ids, i)
	}
	got := ask(t, conn, ids...)
	seqs := map[uint64]bool{}
	for _, id := range ids {
		r, ok := got[id]
		if !ok || r.Code != wire.LineOK || r.Seq == 0 || seqs[r.Seq] {
			t.Fatalf("request %d: %+v (answered %v)", id, r, ok)
		}
		seqs[r.Seq] = true
	}
	if n := h.seq.Load(); n != uint64(len(ids)) {
		t.Fatalf("the host took %d barriers for %d requests", n, len(ids))
	}

	l.serveHost(&lineHost{fail: errors.New("backup b1 is down")})
	if r := ask(t, conn, 99)[99]; r.Code != wire.LineFailed || r.Msg != "backup b1 is down" {
		t.Fatalf("a failed barrier: %+v", r)
	}
	l.serveHost(nil)
	if r := ask(t, conn, 100)[100]; r.Code != wire.LineNoHost {
		t.Fatalf("after the frontend stopped: %+v, want LineNoHost", r)
	}
}

// A plugin that writes garbage loses its line (and nothing else); close
// ends barriers still in flight.
func TestLineClosesOnGarbageAndClose(t *testing.T) {
	l, conn := startLine(t)
	conn.Write([]byte{1, 2, 3})
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(make([]byte, 64)); err == nil && n > 0 {
		t.Fatalf("the line answered a malformed request with %d bytes", n)
	}
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the line kept serving after a malformed request")
	}

	l2, conn2 := startLine(t)
	l2.serveHost(&lineHost{block: true})
	conn2.Write(wire.AppendRequest(nil, 1, wire.LineBarrier))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l2.close() }()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("close waited for a barrier in flight")
	}
}

// A plugin that gives up on a barrier frees its slot on the host; one
// that asks for more than maxLineBarriers at once gets the rest refused at
// once, so the line is always read.
func TestLineCancelAndBound(t *testing.T) {
	l, conn := startLine(t)
	h := &lineHost{}
	h.block = true
	l.serveHost(h)
	for id := uint64(1); id <= maxLineBarriers; id++ {
		conn.Write(wire.AppendRequest(nil, id, wire.LineBarrier))
	}
	if r := ask(t, conn, 1000)[1000]; r.Code != wire.LineFailed {
		t.Fatalf("barrier %d past the bound: %+v, want refused", maxLineBarriers+1, r)
	}
	// A reused id is refused; the call that holds it keeps waiting.
	if r := ask(t, conn, 7)[7]; r.Code != wire.LineFailed || !strings.Contains(r.Msg, "already waiting") {
		t.Fatalf("a second call 7 while 7 waits: %+v, want refused", r)
	}
	for id := uint64(1); id <= maxLineBarriers; id++ {
		conn.Write(wire.AppendRequest(nil, id, wire.LineCancel))
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		n := len(l.inflight)
		l.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d barriers still wait after their callers gave up", n)
		}
	}
	l.serveHost(&lineHost{})
	if r := ask(t, conn, 2000)[2000]; r.Code != wire.LineOK {
		t.Fatalf("a barrier after the cancelled ones: %+v", r)
	}
}

// TestLaunchedPluginBarriersTakeTheLine runs the example plugin as pbfs
// does and checks that its barriers arrive over the line, not over gRPC.
func TestLaunchedPluginBarriersTakeTheLine(t *testing.T) {
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "example")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/pbfs/pbfs/plugins/example").CombinedOutput(); err != nil {
		t.Fatalf("build the example: %v\n%s", err, out)
	}
	p, err := Launch(ctx, bin, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if p.line == nil {
		t.Fatal("launched without a barrier line")
	}
	h := &lineHost{}
	if err := p.Remote().StartFrontend(ctx, "ex", "/", map[string]string{"interval": "20ms"}, h); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); h.seq.Load() < 5; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d barriers in 20 s", h.seq.Load())
		}
	}
	if err := p.Remote().StopFrontend(ctx); err != nil {
		t.Fatal(err)
	}
	if took, came := h.seq.Load(), p.line.served.Load(); came < took {
		t.Fatalf("the host took %d barriers, %d of them over the line: the rest went over gRPC", took, came)
	}
}
