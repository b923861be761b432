package proxy

import (
	"bufio"
	"net"
	"net/http"
)

// Hijack takes the client's connection for a tunnel (an Upgrade answered
// 101 Switching Protocols). httputil.ReverseProxy copies from the
// connection it returns to the upstream, but what the client sent right
// after its request, before it saw the 101 (a WebSocket client's first
// frames, in the same packet as the handshake), is already in the
// server's read buffer, not on the connection: it was dropped. The
// connection returned here is read from that buffer first.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.code = http.StatusSwitchingProtocols
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		c = &earlyConn{Conn: c, early: append([]byte(nil), early...)}
		brw.Reader.Reset(c)
	}
	return c, brw, nil
}

// earlyConn is a hijacked connection that yields the bytes its server had
// read ahead before those still on the wire.
type earlyConn struct {
	net.Conn
	early []byte
}

func (c *earlyConn) Read(p []byte) (int, error) {
	if len(c.early) > 0 {
		n := copy(p, c.early)
		c.early = c.early[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
