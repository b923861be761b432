package main

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// Under systemd (Type=notify) pbfs mount says READY=1 only once the volume
// is mounted: a service ordered after it (After=pbfs-primary.service)
// started about 1.7 s before the mount with Type=exec, wrote to the bare
// directory, and those writes never reached the backups. A stop says
// STOPPING=1.
func TestMountTellsSystemdOnceMounted(t *testing.T) {
	vol, _, jdir := layout(t)
	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type msg struct {
		state   string
		mounted bool
	}
	got := make(chan msg, 4)
	go func() {
		buf := make([]byte, 256)
		for {
			n, _, err := ln.ReadFrom(buf)
			if err != nil {
				return
			}
			got <- msg{string(buf[:n]), fstest.Mounted(vol)}
		}
	}()
	p := startMount(t, []string{"env", "NOTIFY_SOCKET=" + sock}, vol, jdir)
	select {
	case m := <-got:
		if m.state != "READY=1" || !m.mounted {
			t.Fatalf("first notification %q with the volume mounted %v; want READY=1, mounted", m.state, m.mounted)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no READY=1 from a mount that serves:\n%s", p.Out)
	}
	p.Stop()
	select {
	case m := <-got:
		if m.state != "STOPPING=1" {
			t.Fatalf("on stop: %q, want STOPPING=1", m.state)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no STOPPING=1 on stop")
	}
}
