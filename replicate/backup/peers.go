package backup

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A backup's port is open to whoever reaches it; the token is what makes
// a caller a primary (or a peer asking what the backup holds). Until it
// shows the token, a connection costs the backup a descriptor and a few
// kilobytes, for a few seconds: peerGate closes a connection that has not
// authenticated within authWithin, holds at most maxUnauthenticated such
// connections (a new one closes the oldest, so a flood cannot keep a
// primary out), at most maxPeers in all, and never so many that fewer
// than fdReserve descriptors stay free for the journal and the volume.

const (
	// authWithin is how long a connection may take to show the token:
	// a raw stream's magic, TLS and token frame, or gRPC's preface and
	// first call.
	authWithin = 5 * time.Second
	// maxUnauthenticated bounds the connections held that have not shown
	// the token yet.
	maxUnauthenticated = 64
	// maxPeers bounds every connection the port holds: a primary needs
	// two (its raw stream and gRPC), a promotion or a verify one more for
	// each backup.
	maxPeers = 1024
	// minFDReserve is the fewest descriptors kept free for the rest of the
	// process (the journal's segments and Badger's files, the volume's
	// files being applied); an eighth of the limit when that is more.
	minFDReserve = 64
	// floodEvery is how often a kind of refused connection or call is
	// logged while it goes on.
	floodEvery = 10 * time.Second
)

// Reasons a connection was closed (pbfs_backup_connections_closed_total).
const (
	closedAuthTimeout = "auth_timeout"          // no token within authWithin
	closedUnauthLimit = "unauthenticated_limit" // the oldest, to make room
	closedFDLimit     = "descriptor_limit"      // no descriptor to spare
	closedPeerLimit   = "connection_limit"      // maxPeers held
)

// peerGate tracks every connection a backup's port accepted, by its
// remote address (how gRPC's token check finds it).
type peerGate struct {
	m     *backupMetrics
	flood func(kind, msg string, args ...any)

	mu      sync.Mutex
	conns   map[string]*peerConn
	waiting []*peerConn // not authenticated yet, oldest first
	// others is how many descriptors the process held besides the
	// peers' when last counted, at counted.
	others  int
	counted time.Time
}

func newPeerGate(m *backupMetrics, flood func(kind, msg string, args ...any)) *peerGate {
	return &peerGate{m: m, flood: flood, conns: map[string]*peerConn{}}
}

// peerConn is an accepted connection the gate tracks until it closes.
type peerConn struct {
	net.Conn
	g      *peerGate
	key    string
	authed bool // under g.mu
	timer  *time.Timer
}

// Close forgets the connection and closes it.
func (pc *peerConn) Close() error {
	pc.g.forget(pc)
	return pc.Conn.Close()
}

// SyscallConn reaches the socket (gRPC reads its options).
func (pc *peerConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := pc.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}

// admit takes c on, closing the oldest connections that have not
// authenticated to make room; false (c closed) when there is none.
func (g *peerGate) admit(c net.Conn) (net.Conn, bool) {
	pc := &peerConn{Conn: c, g: g, key: c.RemoteAddr().String()}
	var spent, crowded []*peerConn // closed for the budget, for the limit on waiting
	g.mu.Lock()
	if old := g.conns[pc.key]; old != nil {
		g.remove(old) // closed, and its address taken again before its server said so
	}
	budget := g.budget(time.Now())
	for len(g.conns) >= budget && len(g.waiting) > 0 {
		spent = append(spent, g.dropOldest())
	}
	full := len(g.conns) >= budget
	if !full {
		if len(g.waiting) >= maxUnauthenticated {
			crowded = append(crowded, g.dropOldest())
		}
		g.conns[pc.key] = pc
		g.waiting = append(g.waiting, pc)
		pc.timer = time.AfterFunc(authWithin, pc.expire)
	}
	g.gauge()
	g.mu.Unlock()
	reason := closedFDLimit
	if budget == maxPeers {
		reason = closedPeerLimit
	}
	for _, e := range spent {
		e.Conn.Close()
		g.closed(reason, e)
	}
	for _, e := range crowded {
		e.Conn.Close()
		g.closed(closedUnauthLimit, e)
	}
	if full {
		c.Close()
		g.closed(reason, pc)
		return nil, false
	}
	return pc, true
}

// budget is how many connections the port may hold now; the caller holds
// g.mu. The process's own descriptors are counted at most once a second:
// the reserve covers what it opens in between.
func (g *peerGate) budget(now time.Time) int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return maxPeers // cannot tell: the accepts' own EMFILE still shows
	}
	limit := int(min(rl.Cur, 1<<30))
	if now.Sub(g.counted) >= time.Second {
		g.counted = now
		// Besides the peers': the connection being admitted, and the
		// directory read to count them.
		g.others = max(openFDs(limit)-len(g.conns)-2, 0)
	}
	return min(maxPeers, limit-g.others-max(minFDReserve, limit/8))
}

// openFDs counts the process's open descriptors; limit when it cannot
// even open the directory to count them.
func openFDs(limit int) int {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return limit
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return limit
	}
	return len(names)
}

// dropOldest removes the oldest connection that has not authenticated,
// for the caller to close; the caller holds g.mu.
func (g *peerGate) dropOldest() *peerConn {
	pc := g.waiting[0]
	g.waiting = g.waiting[1:]
	delete(g.conns, pc.key)
	pc.timer.Stop()
	return pc
}

// expire closes a connection that has not authenticated in time.
func (pc *peerConn) expire() {
	g := pc.g
	g.mu.Lock()
	waiting := !pc.authed && g.conns[pc.key] == pc
	if waiting {
		g.remove(pc)
	}
	g.mu.Unlock()
	if waiting {
		pc.Conn.Close()
		g.closed(closedAuthTimeout, pc)
	}
}

// authenticated marks the connection from addr as having shown the
// token: it is held as long as its peer keeps it.
func (g *peerGate) authenticated(addr net.Addr) {
	if addr == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	pc := g.conns[addr.String()]
	if pc == nil || pc.authed {
		return
	}
	pc.authed = true
	pc.timer.Stop()
	g.unwait(pc)
	g.gauge()
}

// forget stops tracking pc, closed by its server.
func (g *peerGate) forget(pc *peerConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conns[pc.key] == pc {
		g.remove(pc)
	}
}

// remove stops tracking pc; the caller holds g.mu.
func (g *peerGate) remove(pc *peerConn) {
	delete(g.conns, pc.key)
	pc.timer.Stop()
	if !pc.authed {
		g.unwait(pc)
	}
	g.gauge()
}

func (g *peerGate) unwait(pc *peerConn) {
	for i, w := range g.waiting {
		if w == pc {
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			return
		}
	}
}

// gauge publishes the counts; the caller holds g.mu.
func (g *peerGate) gauge() {
	g.m.conns.WithLabelValues("unauthenticated").Set(float64(len(g.waiting)))
	g.m.conns.WithLabelValues("authenticated").Set(float64(len(g.conns) - len(g.waiting)))
}

var closedWords = map[string]string{
	closedAuthTimeout: fmt.Sprintf("closed a connection that did not show the token within %v", authWithin),
	closedUnauthLimit: fmt.Sprintf("closed the oldest connection that had not shown the token: "+
		"%d were waiting (a flood, or peers without the token)", maxUnauthenticated),
	closedFDLimit: "turned a connection away: the peers' share of this process's descriptors is spent " +
		"(the rest is kept for the journal); if these are primaries, raise the descriptor limit (ulimit -n, LimitNOFILE)",
	closedPeerLimit: fmt.Sprintf("turned a connection away: %d connections are open", maxPeers),
}

// closed counts a connection the gate closed, and logs it once per
// floodEvery for each reason.
func (g *peerGate) closed(reason string, pc *peerConn) {
	g.m.connsClosed.WithLabelValues(reason).Inc()
	g.flood(reason, closedWords[reason], "remote", pc.key)
}
