package replicate_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/testcert"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/primary"
	"github.com/pbfs/pbfs/replicate/wire"
)

// TestMutualTLS: a primary with a certificate from the CA replicates to a
// backup that requires one; a primary without TLS gets nowhere.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := testcert.Write(t, dir, "ca", nil, nil, true)
	testcert.Write(t, dir, "backup", ca, caKey, false)
	testcert.Write(t, dir, "primary", ca, caKey, false)
	files := func(n string) wire.TLSFiles {
		return wire.TLSFiles{Cert: filepath.Join(dir, n+".crt"), Key: filepath.Join(dir, n+".key"), CA: filepath.Join(dir, "ca.crt")}
	}
	vol := filepath.Join(dir, "vol")
	os.Mkdir(vol, 0o755)
	b, err := backup.Open(backup.Config{Volume: vol, Journal: filepath.Join(dir, "bj"), Token: "tok", TLS: files("backup")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go b.Serve(ln)

	ship := func(jdir string, tls wire.TLSFiles) error {
		st, err := journal.OpenStore(filepath.Join(dir, jdir), journal.StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, _, err := st.Append([]journal.Op{{Kind: journal.KindCreate, Path: "f", Mode: 0o644}}, time.Now(), 0, false); err != nil {
			t.Fatal(err)
		}
		p, err := primary.Start(primary.Config{Backups: []string{ln.Addr().String()}, Ack: "all", Token: "tok", VolumeID: "v", Store: st, TLS: tls})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = p.Wait(ctx, 1)
		return err
	}
	if err := ship("plain", wire.TLSFiles{}); err == nil {
		t.Fatal("a primary without TLS replicated to a backup that requires it")
	}
	if err := ship("tls", files("primary")); err != nil {
		t.Fatalf("mutual TLS: %v", err)
	}
	// gRPC calls (resync, report) share the port with the raw stream,
	// behind the same TLS.
	if p, err := backup.Query(context.Background(), ln.Addr().String(), "tok", files("primary")); err != nil || p.DurableSeq != 1 {
		t.Fatalf("a gRPC call over TLS: %+v, %v", p, err)
	}
	if _, err := backup.Query(context.Background(), ln.Addr().String(), "tok", wire.TLSFiles{}); err == nil {
		t.Fatal("a gRPC call without TLS was answered")
	}
	if _, err := os.Stat(filepath.Join(vol, "f")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := b.WaitApplied(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
}
