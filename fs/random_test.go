package fs_test

import (
	"flag"
	"fmt"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

var seeds = flag.Int("seeds", 16, "seeds for the randomized workload tests")

// run drives workers goroutines for steps steps each while another takes
// barriers at random moments, then checks the replay.
func runWorkload(t *testing.T, seed uint64, dataOnly bool, cfg mount.Config) {
	w := fstest.NewWorkload("", dataOnly)
	e := fstest.Setup(t, cfg, w.Seed)
	w.Vol = e.Vol
	w.Run(seed, 4, 250, func() { e.Barrier() }, nil)
	e.CheckReplay()
}

// TestRandomWorkloadReplays is invariant 1: for every seed, replaying the
// journal onto the starting state reproduces the primary's tree exactly.
func TestRandomWorkloadReplays(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*seeds); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { runWorkload(t, seed, false, mount.Config{}) })
	}
}

// TestRandomDataWritesReplay keeps to overlapping data writes, where XDN's
// fuselog diverged in 2 of 20 seeds, with and without write diffing.
func TestRandomDataWritesReplay(t *testing.T) {
	for _, diff := range []bool{false, true} {
		for seed := uint64(1); seed <= uint64(*seeds)/2; seed++ {
			t.Run(fmt.Sprintf("diff=%v/seed%d", diff, seed), func(t *testing.T) {
				runWorkload(t, seed, true, mount.Config{WriteDiff: diff})
			})
		}
	}
}
