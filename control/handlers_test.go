package control

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pbfs/pbfs/internal/status"
)

// fakePrimary is a Backend that changes its backups (Members).
type fakePrimary struct {
	fakeBackend
	mu      sync.Mutex
	backups []string
}

func (f *fakePrimary) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := Status{Role: "primary"}
	for _, a := range f.backups {
		st.Backups = append(st.Backups, status.Backup{Addr: a})
	}
	return st
}

func (f *fakePrimary) AddMember(addr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backups = append(f.backups, addr)
	return nil
}

func (f *fakePrimary) RemoveMember(_ context.Context, addr string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backups = slices.DeleteFunc(f.backups, func(a string) bool { return a == addr })
	return true, nil
}

// serveBackend serves b on a socket of its own and dials it.
func serveBackend(t *testing.T, b Backend) *Client {
	t.Helper()
	dir := t.TempDir()
	ln, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Serve(ctx, ln, b, nil, slog.New(slog.DiscardHandler)); close(done) }()
	c, err := Dial(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); cancel(); <-done })
	return c
}

// A backup's socket answers the primary's endpoints with why not.
func TestControlBackupRefusesPrimaryEndpoints(t *testing.T) {
	c := serveBackend(t, &fakeBackend{})
	ctx := context.Background()
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("status: %v", err)
	}
	for what, err := range map[string]error{
		"add":             second(c.AddBackup(ctx, "b1:7700")),
		"remove":          second(c.RemoveBackup(ctx, "b1:7700")),
		"backup manifest": second(c.BackupManifest(ctx, "b1:7700", 1)),
	} {
		if err == nil || !strings.Contains(err.Error(), "this process is a backup") {
			t.Errorf("%s on a backup: %v", what, err)
		}
	}
	if err := c.Events(ctx, true, func([]byte) error { return nil }); err == nil || !strings.Contains(err.Error(), "keeps no events") {
		t.Errorf("events of a process without them: %v", err)
	}
}

func TestControlMembers(t *testing.T) {
	c := serveBackend(t, &fakePrimary{backups: []string{"b1:7700"}})
	ctx := context.Background()
	got, err := c.AddBackup(ctx, "b2:7700")
	if err != nil || !slices.Equal(got.Backups, []string{"b1:7700", "b2:7700"}) || got.Told {
		t.Fatalf("add: %+v, %v", got, err)
	}
	got, err = c.RemoveBackup(ctx, "b1:7700")
	if err != nil || !slices.Equal(got.Backups, []string{"b2:7700"}) || !got.Told {
		t.Fatalf("remove: %+v, %v", got, err)
	}
	if _, err := c.AddBackup(ctx, ""); err == nil || !strings.Contains(err.Error(), "give the backup's address") {
		t.Fatalf("add without an address: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }
