package sdk

import (
	"net"
	"strconv"
	"testing"

	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

// Listen takes the socket the host handed for the address it names, and
// listens anew for any other.
func TestListenTakesTheHandedSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	t.Setenv(wire.EnvListenFD, strconv.Itoa(int(f.Fd())))
	t.Setenv(wire.EnvListenAddr, addr)
	got, err := Listen(addr)
	if err != nil {
		t.Fatalf("Listen on the handed address: %v", err)
	}
	defer got.Close()
	if got.Addr().String() != addr {
		t.Fatalf("Listen(%s) listens on %s", addr, got.Addr())
	}
	other, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if other.Addr().String() == addr {
		t.Fatal("another address got the handed socket")
	}
}
