package replicate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/journal"
)

// writeCert writes a certificate signed by parent (self-signed if nil).
func writeCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: isCA, BasicConstraintsValid: true,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

// TestMutualTLS: a primary with a certificate from the CA replicates to a
// backup that requires one; a primary without TLS gets nowhere.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := writeCert(t, dir, "ca", nil, nil, true)
	writeCert(t, dir, "backup", ca, caKey, false)
	writeCert(t, dir, "primary", ca, caKey, false)
	files := func(n string) TLSFiles {
		return TLSFiles{Cert: filepath.Join(dir, n+".crt"), Key: filepath.Join(dir, n+".key"), CA: filepath.Join(dir, "ca.crt")}
	}
	vol := filepath.Join(dir, "vol")
	os.Mkdir(vol, 0o755)
	b, err := OpenBackup(BackupConfig{Volume: vol, Journal: filepath.Join(dir, "bj"), Token: "tok", TLS: files("backup")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go b.Serve(ln)

	ship := func(jdir string, tls TLSFiles) error {
		st, err := journal.OpenStore(filepath.Join(dir, jdir), journal.StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, _, err := st.Append([]journal.Op{{Kind: journal.KindCreate, Path: "f", Mode: 0o644}}, time.Now(), 0, false); err != nil {
			t.Fatal(err)
		}
		p, err := StartPrimary(PrimaryConfig{Backups: []string{ln.Addr().String()}, Ack: "all", Token: "tok", VolumeID: "v", Store: st, TLS: tls})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = p.Wait(ctx, 1)
		return err
	}
	if err := ship("plain", TLSFiles{}); err == nil {
		t.Fatal("a primary without TLS replicated to a backup that requires it")
	}
	if err := ship("tls", files("primary")); err != nil {
		t.Fatalf("mutual TLS: %v", err)
	}
	if _, err := os.Stat(filepath.Join(vol, "f")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := b.WaitApplied(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
}
