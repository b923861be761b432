package primary

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// resolveWait bounds how long Check waits for name resolution.
const resolveWait = 2 * time.Second

// sameBackupTwice refuses two backup addresses that resolve to the same IP
// and port ("localhost:7701" and "127.0.0.1:7701"). Both shippers would
// then reach one backup process, which takes each new session in place of
// the other: the streams fight (a barrier took 1.5 s), and one backup
// holding a batch counted twice toward --ack. A name that does not
// resolve now is left to the shipper, which retries it.
func sameBackupTwice(addrs []string) error {
	if len(addrs) < 2 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveWait)
	defer cancel()
	owner := map[netip.AddrPort]string{}
	for _, addr := range addrs {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			continue // Check names it
		}
		pn, err := netip.ParseAddrPort("0.0.0.0:" + port)
		if err != nil {
			continue
		}
		if host == "" {
			host = "localhost"
		}
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			continue
		}
		for _, ip := range ips {
			ap := netip.AddrPortFrom(ip.Unmap(), pn.Port())
			if other, ok := owner[ap]; ok && other != addr {
				return fmt.Errorf("backup addresses %q and %q both reach %s: one backup would count twice toward --ack; give it once", other, addr, ap)
			}
			owner[ap] = addr
		}
	}
	return nil
}
