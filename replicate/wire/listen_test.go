package wire

import (
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAcceptedConnsAreTuned: every connection a backup's port accepts,
// the ones it hands to gRPC included, has the raw stream's keepalive and
// user timeout, so a primary whose machine vanished is noticed on either.
func TestAcceptedConnsAreTuned(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, func(c net.Conn) (net.Conn, bool) { return c, true }, func(c net.Conn) { c.Close() }, func(error) {})
	defer l.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n")); err != nil { // gRPC's preface
		t.Fatal(err)
	}
	got, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	pc, ok := got.(*prefixConn)
	if !ok {
		t.Fatalf("gRPC got a %T, want the sorted connection", got)
	}
	rc, err := pc.Conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var userTimeout, keepAlive, idle int
	var serr error
	rc.Control(func(fd uintptr) {
		if userTimeout, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT); serr != nil {
			return
		}
		if keepAlive, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE); serr != nil {
			return
		}
		idle, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
	})
	if serr != nil {
		t.Fatal(serr)
	}
	if userTimeout != 20000 || keepAlive != 1 || idle != int(rawKeepAlive.Idle.Seconds()) {
		t.Fatalf("accepted conn: TCP_USER_TIMEOUT %d ms, SO_KEEPALIVE %d, TCP_KEEPIDLE %d s; want 20000, 1, %d",
			userTimeout, keepAlive, idle, int(rawKeepAlive.Idle.Seconds()))
	}
}
