// Package repltest holds the helpers that the replication packages' tests
// share: a primary's journal with a batch in it, and a backup served on a
// port. The backup package's own internal tests cannot import it (it
// imports that package); its external tests and the others can.
package repltest

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/backup"
)

// Token is the token of the backups ServeBackup serves.
const Token = "right"

// StoreWithOneBatch is a primary's journal holding batch 1, closed at
// cleanup.
func StoreWithOneBatch(t testing.TB) *journal.Store {
	t.Helper()
	st, err := journal.OpenStore(filepath.Join(t.TempDir(), "pj"), journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, _, err := st.Append([]journal.Op{{Kind: journal.KindCreate, Path: "f", Mode: 0o644}}, time.Now(), 0, false); err != nil {
		t.Fatal(err)
	}
	return st
}

// ServeBackup serves a new backup on addr ("127.0.0.1:0": any port),
// closed in Cleanup; the test is skipped if addr was taken meanwhile.
func ServeBackup(t testing.TB, addr string) (*backup.Backup, net.Listener) {
	t.Helper()
	b, bl := OpenBackup(t, addr)
	go b.Serve(bl)
	return b, bl
}

// OpenBackup opens a new backup and a listener on addr for it, both closed
// in Cleanup, without serving it: the caller serves it as the test needs.
func OpenBackup(t testing.TB, addr string) (*backup.Backup, net.Listener) {
	t.Helper()
	vol := filepath.Join(t.TempDir(), "vol")
	os.Mkdir(vol, 0o755)
	b, err := backup.Open(backup.Config{Volume: vol, Journal: filepath.Join(t.TempDir(), "j"), Token: Token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	bl, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the address was taken meanwhile: %v", err)
	}
	return b, bl
}

// UnusedAddr is a loopback address no one listens on (until someone
// does: a port is free only when asked).
func UnusedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
