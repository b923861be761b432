package delayproxy

import (
	"io"
	"net"
	"slices"
	"time"
)

// Calibrate measures an echo round trip directly and through a delay
// proxy (64-byte messages, the median of 200), to check that the proxy
// adds what it should.
func Calibrate(delay time.Duration) (direct, proxied time.Duration, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	defer ln.Close()
	go serveEcho(ln)
	px, err := New("127.0.0.1:0", ln.Addr().String(), delay)
	if err != nil {
		return 0, 0, err
	}
	defer px.Close()
	rtt := func(addr string) (time.Duration, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		msg, got := make([]byte, 64), make([]byte, 64)
		var ds []time.Duration
		for i := 0; i < 200; i++ {
			t := time.Now()
			if _, err := c.Write(msg); err != nil {
				return 0, err
			}
			if _, err := io.ReadFull(c, got); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(t))
		}
		slices.Sort(ds)
		return ds[len(ds)/2], nil
	}
	if direct, err = rtt(ln.Addr().String()); err != nil {
		return 0, 0, err
	}
	proxied, err = rtt(px.Addr())
	return direct, proxied, err
}

// serveEcho echoes every connection ln accepts back to it, until ln
// closes.
func serveEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}
