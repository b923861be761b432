package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

func TestMain(m *testing.M) { os.Exit(fstest.Main(m)) }

// TestShortSweep runs the short fault sweep (about a minute): faults on
// the nodes and on etcd under a ledgered write load, then one primary,
// every acknowledged write on it and every backup equal to it. The seed
// is drawn and logged; PBFS_SWEEP_SEED replays one.
func TestShortSweep(t *testing.T) {
	fstest.RequireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("the sweep's nodes mount volumes: it needs root")
	}
	seed := uint64(time.Now().UnixNano() % 1e6)
	if s := os.Getenv("PBFS_SWEEP_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PBFS_SWEEP_SEED=%q: %v", s, err)
		}
		seed = v
	}
	dir, err := os.MkdirTemp("", "pbfs-faultsweep-test.")
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the cluster's own Cleanup has
	// stopped the nodes and detached their volumes.
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	var out strings.Builder
	bad := sweep(t, shortConfig(seed), dir, &out)
	t.Log("\n" + out.String())
	if len(bad) > 0 {
		t.Fatalf("seed %d (PBFS_SWEEP_SEED=%d replays it): %d violation(s), directory kept in %s:\n%s",
			seed, seed, len(bad), dir, strings.Join(bad[:min(50, len(bad))], "\n"))
	}
}
