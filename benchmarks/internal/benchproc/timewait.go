package benchproc

import (
	"bufio"
	"io"
	"os"
	"strings"
	"time"
)

// TimeWait counts the machine's TCP sockets in TIME_WAIT (IPv4 and IPv6).
// A benchmark that opens a connection per request leaves tens of thousands
// behind for a minute; the next measurement then pays for the kernel's
// search for a free port, so it waits for them to drain (QuietTCP).
func TimeWait() int {
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if fh, err := os.Open(f); err == nil {
			n += countTimeWait(fh)
			fh.Close()
		}
	}
	return n
}

// countTimeWait counts the lines of a /proc/net/tcp table in state 06.
func countTimeWait(r io.Reader) int {
	n := 0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 3 && f[3] == "06" {
			n++
		}
	}
	return n
}

// QuietTCP waits, at most max, until no more than limit sockets are in
// TIME_WAIT, and returns how many are left and how long it waited.
func QuietTCP(limit int, max time.Duration) (int, time.Duration) {
	start := time.Now()
	for {
		n := TimeWait()
		if n <= limit || time.Since(start) >= max {
			return n, time.Since(start)
		}
		time.Sleep(time.Second)
	}
}
