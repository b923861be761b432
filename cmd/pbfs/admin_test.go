package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/testcert"
)

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// --admin serves metrics and pprof: openly on loopback; elsewhere only
// with the replication token, and pbfs refuses to start an unguarded one.
func TestAdminListener(t *testing.T) {
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	os.Mkdir(vol, 0o755)
	addr := fstest.FreeAddr(t)
	fstest.StartMount(t, nil, vol, jdir, "--admin", addr)
	if code, body := get(t, "http://"+addr+"/metrics", ""); code != 200 || !strings.Contains(body, "pbfs_journal_free_bytes") {
		t.Fatalf("metrics on loopback: %d\n%.300s", code, body)
	}
	if code, body := get(t, "http://"+addr+"/debug/pprof/", ""); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("pprof: %d\n%.300s", code, body)
	}

	_, port, _ := net.SplitHostPort(fstest.FreeAddr(t))
	open := "0.0.0.0:" + port
	vol2 := filepath.Join(dir, "vol2")
	os.Mkdir(vol2, 0o755)
	t.Setenv("PBFS_TOKEN", "")
	if out, code := run(t, "mount", "--journal", filepath.Join(dir, "j2"), "--admin", open, vol2); code != 2 || !strings.Contains(out, "not on loopback") {
		t.Fatalf("unguarded admin off loopback: exit %d:\n%s", code, out)
	}
	fstest.StartMount(t, nil, vol2, filepath.Join(dir, "j2"), "--admin", open, "--token", "s3cret")
	url := "http://127.0.0.1:" + port + "/metrics"
	if code, _ := get(t, url, ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code, _ := get(t, url, "wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", code)
	}
	if code, body := get(t, url, "s3cret"); code != 200 || !strings.Contains(body, "pbfs_") {
		t.Errorf("with the token: %d", code)
	}
	// A load balancer reads the status code without the token; the
	// details (role, problems, progress) need it.
	ready := "http://127.0.0.1:" + port + "/readyz"
	if code, body := get(t, ready, ""); code != 200 || strings.TrimSpace(body) != "ready" {
		t.Errorf("/readyz without the token: %d %q, want 200 ready", code, body)
	}
	if code, body := get(t, ready, "s3cret"); code != 200 || !strings.Contains(body, `"role": "primary"`) {
		t.Errorf("/readyz with the token: %d %q", code, body)
	}
	if code, body := get(t, "http://127.0.0.1:"+port+"/healthz", ""); code != 200 || strings.TrimSpace(body) != "alive" {
		t.Errorf("/healthz without the token: %d %q", code, body)
	}
}

// With the TLS files, the admin listener is guarded as the replication
// channel is: HTTPS with a client certificate the CA signed, and the token.
func TestAdminListenerTLS(t *testing.T) {
	dir := t.TempDir()
	testcert.Set(t, dir, "node", "operator")
	vol := filepath.Join(dir, "vol")
	os.Mkdir(vol, 0o755)
	addr := fstest.FreeAddr(t)
	cmd := osexec.Command(pbfsBin, "backup", "--listen", fstest.FreeAddr(t), "--journal", filepath.Join(dir, "j"), "--token", "s3cret",
		"--tls-cert", filepath.Join(dir, "node.crt"), "--tls-key", filepath.Join(dir, "node.key"), "--tls-ca", filepath.Join(dir, "ca.crt"),
		"--admin", addr, vol)
	out := &fstest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	must(t, cmd.Start())
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	pool := x509.NewCertPool()
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	pool.AppendCertsFromPEM(ca)
	client := func(withCert bool) *http.Client {
		cfg := &tls.Config{RootCAs: pool}
		if withCert {
			cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "operator.crt"), filepath.Join(dir, "operator.key"))
			must(t, err)
			cfg.Certificates = []tls.Certificate{cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	}
	get := func(c *http.Client, token string) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var code int
	var err error
	for i := 0; i < 100; i++ {
		if code, err = get(client(true), "s3cret"); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != 200 {
		t.Fatalf("client certificate and token: %d %v\n%s", code, err, out)
	}
	if _, err := get(client(false), "s3cret"); err == nil {
		t.Error("a client without a certificate got through")
	}
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil && resp.StatusCode == 200 {
		t.Error("plain HTTP got through")
	}
}
