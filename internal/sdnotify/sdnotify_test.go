package sdnotify

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestNotify(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Fatalf("without NOTIFY_SOCKET: %v %v", sent, err)
	}
	for _, abstract := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "notify")
		name, env := path, path
		if abstract {
			name, env = "\x00pbfs-sdnotify-test-"+filepath.Base(filepath.Dir(path)), "@pbfs-sdnotify-test-"+filepath.Base(filepath.Dir(path))
		}
		ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("NOTIFY_SOCKET", env)
		if sent, err := Notify(Ready); !sent || err != nil {
			t.Fatalf("abstract %v: %v %v", abstract, sent, err)
		}
		buf := make([]byte, 64)
		ln.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := ln.ReadFrom(buf)
		ln.Close()
		if err != nil || string(buf[:n]) != Ready {
			t.Fatalf("abstract %v: got %q %v", abstract, buf[:n], err)
		}
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody"))
	if sent, err := Notify(Ready); sent || err == nil {
		t.Fatalf("to a socket nobody listens on: %v %v", sent, err)
	}
}
