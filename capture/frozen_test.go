package capture_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/capture"
	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
)

// While Committer.Frozen runs its function, the backing directory is the
// volume exactly as of the batch it names: under the randomized workload,
// with barriers racing it, each frozen view must equal the starting state
// with the journal replayed up to that batch. pbfs verify's exact round
// and every resync snapshot rely on it.
func TestFrozenIsExact(t *testing.T) {
	k, vol, start := seeded(t, capture.Options{Capture: true, Metrics: capture.NewMetrics(nil)})
	store, err := journal.OpenStore(filepath.Join(t.TempDir(), "j"), journal.StoreOptions{LazyAppends: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := capture.NewCommitter(k.fs, store, time.Hour, nil, nil)

	type view struct {
		seq  uint64
		tree fstest.Tree
	}
	var views []view
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { // barriers race the frozen views
		defer bg.Done()
		r := rand.New(rand.NewPCG(3, 99))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(r.IntN(1500)) * time.Microsecond):
				c.Barrier(context.Background())
			}
		}
	}()
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(7 * time.Millisecond):
			}
			_, err := c.Frozen(context.Background(), func(h journal.Header) error {
				tree, err := fstest.ReadTree(vol)
				views = append(views, view{h.Seq, tree})
				return err
			})
			if err != nil {
				t.Errorf("frozen: %v", err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(3, uint64(w)))
			for i := 0; i < 600; i++ {
				k.step(r)
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	if len(views) < 3 {
		t.Fatalf("only %d frozen views were taken", len(views))
	}

	a, err := apply.New(start, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	applied := uint64(0)
	for _, v := range views {
		for ; applied < v.seq; applied++ {
			enc, err := store.Get(applied + 1)
			if err != nil {
				t.Fatal(err)
			}
			b, err := journal.Decode(enc)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Apply(b); err != nil {
				t.Fatalf("apply %d: %v", b.Seq, err)
			}
		}
		fstest.RequireEqual(t, v.tree, fstest.Snapshot(t, start), "the frozen view vs the journal replayed to its batch")
	}
	t.Logf("%d frozen views, %d batches", len(views), applied)
}
