// Package sdnotify tells systemd a service's state (sd_notify(3)): a unit
// of Type=notify counts as started only once its process says READY=1, so
// units ordered after it start only then.
package sdnotify

import (
	"fmt"
	"net"
	"os"
)

// The states pbfs sends.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
)

// Notify sends state to the socket $NOTIFY_SOCKET names (a path, or an
// abstract socket written with a leading @). It reports false, with no
// error, when the variable is unset: not started by systemd, or by a unit
// that does not wait.
func Notify(state string) (bool, error) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return false, nil
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("notify systemd: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("notify systemd: %w", err)
	}
	return true, nil
}
