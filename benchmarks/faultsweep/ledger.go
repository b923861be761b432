package main

import (
	"bytes"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/control"
)

// fuseMagic is statfs's f_type of a FUSE file system.
const fuseMagic = 0x65735546

// ledger is every write a barrier acknowledged, with its bytes.
type ledger struct {
	mu       sync.Mutex
	acked    map[string][]byte // path in the volume -> contents
	byNode   map[string]int    // acknowledged writes per primary
	attempts int
	unacked  int // written (or tried) without an acknowledgement
}

func newLedger() *ledger { return &ledger{acked: map[string][]byte{}, byNode: map[string]int{}} }

// writer writes new files through whichever node serves as the primary and
// enters each one in the ledger once a barrier taken after it returned.
type writer struct {
	nodes []*node // only their names and paths are read
	seed  uint64
	l     *ledger
	last  *node // the primary the last write went to
}

// run writes until ctx ends.
func (w *writer) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		nd := w.find()
		if nd == nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		w.write(ctx, nd, i)
		sleep(ctx, 5*time.Millisecond)
	}
}

// find returns a node whose control socket says it is the primary,
// asking the last one first.
func (w *writer) find() *node {
	order := w.nodes
	if w.last != nil {
		order = append([]*node{w.last}, w.nodes...)
	}
	for _, nd := range order {
		if st, ok := nodeStatus(nd); ok && st.Role == "primary" {
			w.last = nd
			return nd
		}
	}
	return nil
}

// write creates one file of seeded random bytes on nd's mount, then takes
// a barrier on nd; the write is acknowledged if the barrier returns.
func (w *writer) write(ctx context.Context, nd *node, i int) {
	rng := mrand.New(mrand.NewPCG(w.seed, uint64(i)))
	data := make([]byte, 1+rng.IntN(8192))
	for k := range data {
		data[k] = byte(rng.Uint32())
	}
	rel := filepath.Join(fmt.Sprintf("d%02d", i/200), fmt.Sprintf("w%06d", i))
	w.l.mu.Lock()
	w.l.attempts++
	w.l.mu.Unlock()
	if err := writeOnMount(nd.vol, rel, data); err != nil || !barrier(ctx, nd) {
		w.l.mu.Lock()
		w.l.unacked++
		w.l.mu.Unlock()
		return
	}
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	w.l.acked[rel] = data
	w.l.byNode[nd.name]++
}

// writeOnMount writes rel under vol only if vol is a FUSE mount when it
// is opened: a deposed primary's volume is its backup's copy then, which
// a write behind the backup's back would corrupt.
func writeOnMount(vol, rel string, data []byte) error {
	dfd, err := unix.Open(vol, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", vol, err)
	}
	defer unix.Close(dfd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(dfd, &st); err != nil || st.Type != fuseMagic {
		return fmt.Errorf("write %s: %s is not served by a mount", rel, vol)
	}
	if err := unix.Mkdirat(dfd, filepath.Dir(rel), 0o755); err != nil && err != unix.EEXIST {
		return fmt.Errorf("mkdir %s: %w", filepath.Dir(rel), err)
	}
	fd, err := unix.Openat(dfd, rel, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	_, werr := f.Write(data)
	if err := f.Close(); werr == nil {
		werr = err
	}
	return werr
}

// barrier takes a barrier on nd within 5 s.
func barrier(ctx context.Context, nd *node) bool {
	cl, err := control.Dial(nd.jdir)
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = cl.Barrier(ctx)
	return err == nil
}

// check lists the acknowledged writes missing or different on vol.
func (l *ledger) check(vol string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var bad []string
	for rel, want := range l.acked {
		got, err := os.ReadFile(filepath.Join(vol, rel))
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("acknowledged write %s lost: %v", rel, err))
		case !bytes.Equal(got, want):
			bad = append(bad, fmt.Sprintf("acknowledged write %s has %d bytes that differ from the %d written", rel, len(got), len(want)))
		}
	}
	sort.Strings(bad)
	return bad
}

// summary is the ledger in one line.
func (l *ledger) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for n := range l.byNode {
		names = append(names, n)
	}
	sort.Strings(names)
	per := ""
	for _, n := range names {
		per += fmt.Sprintf(" %s:%d", n, l.byNode[n])
	}
	return fmt.Sprintf("%d writes tried, %d acknowledged (by primary:%s), %d not", l.attempts, len(l.acked), per, l.unacked)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
