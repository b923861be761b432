package replicate

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/pbfs/pbfs/replicate/wire"
)

// A backup's raw streams: the listener (wire.Listener) hands each one
// here, and Close ends them all.

// serveRaw serves one raw stream until it ends or the backup closes.
func (b *Backup) serveRaw(c net.Conn, tlsCfg *tls.Config, gate *peerGate) {
	if !b.trackRaw(c) {
		c.Close()
		return
	}
	defer b.untrackRaw(c)
	s, err := wire.Accept(c, tlsCfg, b.cfg.Token, b.refusedCaller)
	if err != nil {
		b.log.Debug("raw stream not opened", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	gate.authenticated(c.RemoteAddr())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = b.serveStream(ctx, s)
	b.log.Debug("raw stream ended", "remote", c.RemoteAddr().String(), "err", err)
}

// trackRaw notes a raw stream's connection, for Close to end it; false
// once the backup is closing.
func (b *Backup) trackRaw(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.raws == nil {
		return false
	}
	b.raws[c] = struct{}{}
	b.rawWG.Add(1)
	return true
}

func (b *Backup) untrackRaw(c net.Conn) {
	c.Close()
	b.mu.Lock()
	delete(b.raws, c)
	b.mu.Unlock()
	b.rawWG.Done()
}

// closeRaws ends every raw stream and waits until none is served.
func (b *Backup) closeRaws() {
	b.mu.Lock()
	for c := range b.raws {
		c.Close()
	}
	b.raws = nil
	b.mu.Unlock()
	b.rawWG.Wait()
}
