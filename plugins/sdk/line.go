package sdk

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"

	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

// lineClient takes barriers over the barrier line the host gave this
// process (wire.LinePair): a request packet out, its reply back, matched
// by id by one reader.
type lineClient struct {
	conn *net.UnixConn
	log  *slog.Logger

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan wire.LineReply
	err     error // set once the line is gone; every call fails with it
}

// openLine takes over the descriptor the host named in the environment,
// or returns nil (the host gave none, or it is unusable: barriers then
// go over gRPC).
func openLine(log *slog.Logger) *lineClient {
	v, ok := os.LookupEnv(wire.EnvLine)
	if !ok {
		return nil
	}
	os.Unsetenv(wire.EnvLine) // not for the plugin's own children
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 0 {
		log.Warn("barrier line: bad descriptor; barriers go over gRPC", "value", v)
		return nil
	}
	f := os.NewFile(uintptr(fd), "pbfs-barrier-line")
	defer f.Close() // the connection holds a duplicate, close-on-exec
	conn, err := wire.LineConn(f)
	if err != nil {
		log.Warn("barrier line unusable; barriers go over gRPC", "err", err)
		return nil
	}
	return newLineClient(conn, log)
}

func newLineClient(conn *net.UnixConn, log *slog.Logger) *lineClient {
	c := &lineClient{conn: conn, log: log, waiting: map[uint64]chan wire.LineReply{}}
	go c.read()
	return c
}

// Barrier sends one request and waits for its reply or for ctx.
func (c *lineClient) Barrier(ctx context.Context) (uint64, error) {
	ch := make(chan wire.LineReply, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return 0, c.err
	}
	c.next++
	id := c.next
	c.waiting[id] = ch
	c.mu.Unlock()
	if _, err := c.conn.Write(wire.AppendRequest(nil, id, wire.LineBarrier)); err != nil {
		c.forget(id)
		return 0, fmt.Errorf("barrier: %w: %v", ErrHostGone, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return 0, c.gone()
		}
		switch r.Code {
		case wire.LineOK:
			return r.Seq, nil
		case wire.LineFailed:
			return 0, fmt.Errorf("barrier: %w: %s", ErrBarrier, r.Msg)
		default:
			return 0, fmt.Errorf("barrier: %w: %s", ErrHostGone, r.Msg)
		}
	case <-ctx.Done():
		c.forget(id)
		// The host stops waiting for it too (its barrier's batch is
		// sealed all the same); a lost cancel only costs a slot there
		// until the barrier ends.
		c.conn.Write(wire.AppendRequest(nil, id, wire.LineCancel))
		return 0, fmt.Errorf("barrier: %w", ctx.Err())
	}
}

func (c *lineClient) forget(id uint64) {
	c.mu.Lock()
	delete(c.waiting, id)
	c.mu.Unlock()
}

func (c *lineClient) gone() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// read hands each reply to its caller until the line ends; then every
// caller, waiting or to come, gets ErrHostGone.
func (c *lineClient) read() {
	buf := make([]byte, wire.MaxLinePacket)
	var cause error
	for {
		n, err := c.conn.Read(buf)
		if err == nil && n == 0 {
			err = fmt.Errorf("the host closed it")
		}
		var r wire.LineReply
		if err == nil {
			r, err = wire.ParseReply(buf[:n])
		}
		if err != nil {
			cause = err
			break
		}
		c.mu.Lock()
		ch := c.waiting[r.ID]
		delete(c.waiting, r.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- r // buffered: never blocks
		}
	}
	c.conn.Close()
	c.mu.Lock()
	c.err = fmt.Errorf("barrier: %w: barrier line: %v", ErrHostGone, cause)
	for id, ch := range c.waiting {
		close(ch)
		delete(c.waiting, id)
	}
	c.mu.Unlock()
	c.log.Debug("barrier line ended", "err", cause)
}
