package host

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

// maxLineBarriers bounds the barriers one plugin has in flight over its
// line; a plugin that asks for more waits until one returns.
const maxLineBarriers = 256

// line serves a plugin's barriers over the socket pair made at launch
// (wire.LinePair). It answers with the Host of the running frontend, and
// with wire.LineNoHost while none runs.
type line struct {
	conn *net.UnixConn
	log  *slog.Logger
	ctx  context.Context // ends when the line closes: barriers in flight give up
	stop context.CancelFunc
	sem  chan struct{}
	done chan struct{} // closed when serve returns
	// served counts the requests read: tests tell by it that barriers
	// came over the line rather than over gRPC.
	served atomic.Uint64

	mu   sync.Mutex // guards host
	host sdk.Host
}

func newLine(conn *net.UnixConn, log *slog.Logger) *line {
	ctx, stop := context.WithCancel(context.Background())
	l := &line{conn: conn, log: log, ctx: ctx, stop: stop, sem: make(chan struct{}, maxLineBarriers), done: make(chan struct{})}
	go l.serve()
	return l
}

// serveHost answers barriers with h from now on (nil: none runs).
func (l *line) serveHost(h sdk.Host) {
	l.mu.Lock()
	l.host = h
	l.mu.Unlock()
}

func (l *line) current() sdk.Host {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.host
}

// serve reads requests until the line closes. Each barrier runs on a
// goroutine of its own, so that concurrent ones group into one commit as
// they do over gRPC.
func (l *line) serve() {
	defer close(l.done)
	defer l.stop()
	buf := make([]byte, wire.MaxLinePacket)
	for {
		n, err := l.conn.Read(buf)
		if err == nil && n == 0 {
			err = errors.New("the plugin closed it") // a zero-length packet is end of file
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.log.Debug("plugin barrier line closed", "err", err)
			}
			return
		}
		id, err := wire.ParseRequest(buf[:n])
		if err != nil {
			// Not our plugin's SDK speaking: stop listening to it.
			l.log.Error("plugin barrier line: closing it", "err", err)
			l.conn.Close()
			return
		}
		l.served.Add(1)
		select {
		case l.sem <- struct{}{}:
		case <-l.ctx.Done():
			return
		}
		go l.barrier(id)
	}
}

func (l *line) barrier(id uint64) {
	defer func() { <-l.sem }()
	r := wire.LineReply{ID: id, Code: wire.LineNoHost, Msg: "the plugin's frontend is not started"}
	if h := l.current(); h != nil {
		seq, err := h.Barrier(l.ctx)
		switch {
		case err == nil:
			r.Code, r.Seq, r.Msg = wire.LineOK, seq, ""
		case l.ctx.Err() != nil:
			return // the line closed: nobody to answer
		default:
			r.Code, r.Msg = wire.LineFailed, err.Error()
		}
	}
	// One Write is one packet, whole: concurrent replies need no lock.
	if _, err := l.conn.Write(wire.AppendReply(nil, r)); err != nil && l.ctx.Err() == nil {
		l.log.Debug("plugin barrier line: reply not sent", "err", err)
	}
}

// close ends the line and waits for its reader; barriers in flight see
// their context end.
func (l *line) close() {
	l.stop()
	l.conn.Close()
	<-l.done
}
