package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
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
}
