package replica

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/replicate/backup"
)

// A replica whose start fails half way releases all it took (the
// journal's lock, the control socket), so the next start on the same
// journal succeeds; a running one answers its control socket as a
// backup, and Close removes the socket.
func TestStartFailsCleanlyThenServes(t *testing.T) {
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	bcfg := backup.Config{Volume: vol, Journal: jdir, Token: "test-token-0123456789"}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if r, err := Start(Config{Backup: bcfg, Listen: busy.Addr().String()}); err == nil {
		r.Close()
		t.Fatal("started on a port in use")
	}
	r, err := Start(Config{Backup: bcfg, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("start after a failed start: %v", err)
	}
	cl, err := control.Dial(jdir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cl.Status(context.Background())
	cl.Close()
	if err != nil || st.Role != "backup" || st.Volume != vol || st.Backup == nil {
		t.Fatalf("control socket: %+v, %v", st, err)
	}
	if _, err := cl.Barrier(context.Background()); err == nil {
		t.Fatal("a backup took a barrier")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	sock, _ := control.SocketPath(jdir)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the control socket outlives Close: %v", err)
	}
	if err := <-r.Served(); err != nil {
		t.Fatalf("Served after Close: %v", err)
	}
}
