package sdk

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

// linePair gives a lineClient and the host's end of its line, raw.
func linePair(t *testing.T) (*lineClient, *net.UnixConn) {
	t.Helper()
	host, conn, err := wire.LineConns()
	if err != nil {
		t.Fatal(err)
	}
	c := newLineClient(conn, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { host.Close(); conn.Close() })
	return c, host
}

// readRequests reads n barrier requests from the host's end, and the
// cancels that come among them.
func readRequests(t *testing.T, host *net.UnixConn, n int) (ids, cancels []uint64) {
	t.Helper()
	buf := make([]byte, wire.MaxLinePacket)
	host.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(ids) < n {
		k, err := host.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		id, op, err := wire.ParseRequest(buf[:k])
		if err != nil {
			t.Fatal(err)
		}
		if op == wire.LineCancel {
			cancels = append(cancels, id)
		} else {
			ids = append(ids, id)
		}
	}
	return ids, cancels
}

// TestLineClientMatchesReplies answers concurrent barriers out of order
// and checks each caller gets its own reply.
func TestLineClientMatchesReplies(t *testing.T) {
	c, host := linePair(t)
	const n = 50
	got := make([]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = c.Barrier(context.Background())
		}()
	}
	ids, _ := readRequests(t, host, n)
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		if _, err := host.Write(wire.AppendReply(nil, wire.LineReply{ID: id, Seq: 1000 + id})); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("barrier %d: %v", i, errs[i])
		}
		if got[i] <= 1000 || got[i] > 1000+n || seen[got[i]] {
			t.Fatalf("barrier %d got seq %d: not its own reply (%v)", i, got[i], got)
		}
		seen[got[i]] = true
	}
}

func TestLineClientErrors(t *testing.T) {
	c, host := linePair(t)
	reply := func(code byte, msg string) error {
		done := make(chan error, 1)
		go func() { _, err := c.Barrier(context.Background()); done <- err }()
		ids, _ := readRequests(t, host, 1)
		host.Write(wire.AppendReply(nil, wire.LineReply{ID: ids[0], Code: code, Msg: msg}))
		return <-done
	}
	if err := reply(wire.LineFailed, "backup b1 is down"); !errors.Is(err, ErrBarrier) || !contains(err, "backup b1 is down") {
		t.Errorf("a failed barrier: %v, want ErrBarrier with the host's message", err)
	}
	if err := reply(wire.LineNoHost, "not started"); !errors.Is(err, ErrHostGone) {
		t.Errorf("no host: %v, want ErrHostGone", err)
	}

	// A caller that gives up returns at once and tells the host; its
	// late reply is dropped.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Barrier(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a barrier past its deadline: %v", err)
	}
	ids, _ := readRequests(t, host, 1)
	host.Write(wire.AppendReply(nil, wire.LineReply{ID: ids[0], Seq: 7}))
	done := make(chan error, 1)
	go func() { _, err := c.Barrier(context.Background()); done <- err }()
	next, cancels := readRequests(t, host, 1)
	if len(cancels) != 1 || cancels[0] != ids[0] {
		t.Errorf("cancels %v, want one for the call that gave up (%d)", cancels, ids[0])
	}
	host.Write(wire.AppendReply(nil, wire.LineReply{ID: next[0], Seq: 8}))
	if err := <-done; err != nil {
		t.Errorf("the next barrier after a dropped reply: %v", err)
	}

	// The host going away fails the waiting caller and every later one.
	go func() { _, err := c.Barrier(context.Background()); done <- err }()
	readRequests(t, host, 1)
	host.Close()
	if err := <-done; !errors.Is(err, ErrHostGone) {
		t.Errorf("waiting when the host left: %v, want ErrHostGone", err)
	}
	if _, err := c.Barrier(context.Background()); !errors.Is(err, ErrHostGone) {
		t.Errorf("after the host left: %v, want ErrHostGone", err)
	}
}

// A reply the SDK cannot read ends the line: callers learn the host is
// unusable instead of waiting forever.
func TestLineClientRefusesGarbage(t *testing.T) {
	c, host := linePair(t)
	done := make(chan error, 1)
	go func() { _, err := c.Barrier(context.Background()); done <- err }()
	readRequests(t, host, 1)
	host.Write([]byte("not a reply"))
	select {
	case err := <-done:
		if !errors.Is(err, ErrHostGone) {
			t.Fatalf("after a malformed reply: %v, want ErrHostGone", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a malformed reply left the caller waiting")
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }
