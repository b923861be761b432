package sdk

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

// Listen listens on addr for a frontend's clients: on the socket the host
// handed the plugin for that address, if it did (pbfs node does, so that
// a client is never refused while the node changes roles: the socket
// listens all along, and connections wait in its queue while no process
// accepts them), else on a new one.
func Listen(addr string) (net.Listener, error) {
	fd, err := strconv.Atoi(os.Getenv(wire.EnvListenFD))
	if err != nil || fd < 3 || os.Getenv(wire.EnvListenAddr) != addr {
		return net.Listen("tcp", addr)
	}
	f := os.NewFile(uintptr(fd), addr)
	defer f.Close() // FileListener holds a copy
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listen on the socket the host handed for %s (descriptor %d): %w", addr, fd, err)
	}
	return ln, nil
}
