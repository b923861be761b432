package main

import (
	"context"
	"testing"

	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/sdktest"
)

// Over the real plugin protocol: -shm files at any depth are local-only,
// the WAL and journal take the configured policy, the database file the
// mount's.
func TestSQLiteRules(t *testing.T) {
	p := sdktest.Serve(t, &Hint{})
	ctx := context.Background()
	if _, err := p.Rules(ctx, "sqlite", "/vol", sdk.Config{"fsync": "replicated"}); err != nil {
		t.Fatal(err)
	}
	paths := []string{"app.db-shm", "data/deep/app.db-shm", "app.db-wal", "data/app.db-journal", "app.db", "shm"}
	hints, err := p.Classify(ctx, paths)
	if err != nil {
		t.Fatal(err)
	}
	want := []sdk.PathHint{{LocalOnly: true}, {LocalOnly: true}, {Fsync: sdk.FsyncReplicated}, {Fsync: sdk.FsyncReplicated}, {}, {}}
	for i, h := range hints {
		if h.LocalOnly != want[i].LocalOnly || h.Fsync != want[i].Fsync {
			t.Errorf("%s: %+v, want %+v", paths[i], h, want[i])
		}
	}
	for _, cfg := range []sdk.Config{{"fsync": "never"}, {"fsnyc": "local"}} {
		if _, err := p.Rules(ctx, "sqlite", "/vol", cfg); err == nil {
			t.Errorf("config %v accepted", cfg)
		}
	}
}
