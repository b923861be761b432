package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

// maxLineBarriers bounds the barriers one plugin has in flight over its
// line; more are refused at once (wire.LineFailed), so the line is always
// read and a plugin's request never waits to be sent.
const maxLineBarriers = 256

// line serves a plugin's barriers over the socket pair made at launch
// (wire.LinePair). It answers with the Host of the running frontend, and
// with wire.LineNoHost while none runs.
type line struct {
	conn *net.UnixConn
	log  *slog.Logger
	ctx  context.Context // ends when the line closes: barriers in flight give up
	stop context.CancelFunc
	done chan struct{} // closed when serve returns
	// served counts the requests read: tests tell by it that barriers
	// came over the line rather than over gRPC.
	served atomic.Uint64

	mu       sync.Mutex // guards host and inflight
	host     sdk.Host
	inflight map[uint64]context.CancelFunc // barriers running, by call id
}

func newLine(conn *net.UnixConn, log *slog.Logger) *line {
	ctx, stop := context.WithCancel(context.Background())
	l := &line{conn: conn, log: log, ctx: ctx, stop: stop, done: make(chan struct{}), inflight: map[uint64]context.CancelFunc{}}
	go l.serve()
	return l
}

// serveHost answers barriers with h from now on (nil: none runs).
func (l *line) serveHost(h sdk.Host) {
	l.mu.Lock()
	l.host = h
	l.mu.Unlock()
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
		id, op, err := wire.ParseRequest(buf[:n])
		if err != nil {
			// Not our plugin's SDK speaking: stop listening to it.
			l.log.Error("plugin barrier line: closing it", "err", err)
			l.conn.Close()
			return
		}
		if op == wire.LineCancel {
			l.cancel(id)
			continue
		}
		l.served.Add(1)
		l.start(id)
	}
}

// start runs call id's barrier on a goroutine of its own, so that
// concurrent ones group into one commit as they do over gRPC, or refuses
// it when too many run.
func (l *line) start(id uint64) {
	l.mu.Lock()
	h, busy := l.host, len(l.inflight) >= maxLineBarriers
	_, dup := l.inflight[id]
	var ctx context.Context
	var cancel context.CancelFunc
	if h != nil && !busy && !dup {
		ctx, cancel = context.WithCancel(l.ctx)
		l.inflight[id] = cancel
	}
	l.mu.Unlock()
	switch {
	case h == nil:
		l.reply(wire.LineReply{ID: id, Code: wire.LineNoHost, Msg: "the plugin's frontend is not started"})
	case dup:
		// Not the SDK's doing (it never reuses an id): refused, and the
		// running call keeps its id.
		l.reply(wire.LineReply{ID: id, Code: wire.LineFailed, Msg: fmt.Sprintf("call %d is already waiting", id)})
	case busy:
		l.reply(wire.LineReply{ID: id, Code: wire.LineFailed, Msg: fmt.Sprintf("%d barriers of this plugin already wait", maxLineBarriers)})
	default:
		go l.barrier(ctx, cancel, id, h)
	}
}

func (l *line) barrier(ctx context.Context, cancel context.CancelFunc, id uint64, h sdk.Host) {
	seq, err := h.Barrier(ctx)
	gaveUp := ctx.Err() != nil // the line closed, or the plugin gave up on this call
	l.mu.Lock()
	delete(l.inflight, id)
	l.mu.Unlock()
	cancel()
	switch {
	case err == nil:
		l.reply(wire.LineReply{ID: id, Code: wire.LineOK, Seq: seq})
	case gaveUp:
		// Nobody waits for the answer.
	default:
		l.reply(wire.LineReply{ID: id, Code: wire.LineFailed, Msg: err.Error()})
	}
}

// cancel ends the wait of call id's barrier, if it still runs.
func (l *line) cancel(id uint64) {
	l.mu.Lock()
	cancel := l.inflight[id]
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// reply sends one answer. One Write is one packet, whole: concurrent
// replies need no lock.
func (l *line) reply(r wire.LineReply) {
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
