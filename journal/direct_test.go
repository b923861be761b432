package journal

import (
	"bytes"
	"log/slog"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSyncedAppendsGoDirect appends records of every size, synced (the
// O_DIRECT path) and lazy (buffered) in random turns, across segment
// rotations and reopens, and checks every body read back, through the
// page cache and from a fresh open: a direct append that rewrote its
// last block wrongly, or a tail copy gone stale after a buffered append,
// shows as a body that differs or a log that ends early.
func TestSyncedAppendsGoDirect(t *testing.T) {
	appendEverySize(t, false)
}

// TestSyncedAppendsWithoutDirect is the same on a file system that
// refuses O_DIRECT: every append is buffered, and nothing is lost.
func TestSyncedAppendsWithoutDirect(t *testing.T) {
	old := openDirect
	openDirect = func(string) (int, error) { return -1, unix.EINVAL }
	t.Cleanup(func() { openDirect = old })
	appendEverySize(t, true)
}

func appendEverySize(t *testing.T, refused bool) {
	smallSegments(t, 4<<20)
	dir := t.TempDir()
	room := func(int64) bool { return true }
	log := slog.New(slog.DiscardHandler)
	rng := rand.New(rand.NewPCG(7, 16))
	want := map[uint64][]byte{}
	seq := uint64(1)
	var direct, appends uint64
	fsRefuses := false

	open := func() *batchLog {
		t.Helper()
		l, err := openBatchLog(dir, false, log, room)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.close) // a failed test stops the spare's filling before the directory goes
		return l
	}
	check := func(l *batchLog, what string) {
		t.Helper()
		first, last := l.bounds()
		if first != 1 || last != seq-1 {
			t.Fatalf("%s: the log holds %d..%d, want 1..%d", what, first, last, seq-1)
		}
		for s := first; s <= last; s++ {
			got, err := l.get(s)
			if err != nil || !bytes.Equal(got, want[s]) {
				t.Fatalf("%s: batch %d: %d bytes, want %d (%v)", what, s, len(got), len(want[s]), err)
			}
		}
	}
	size := func() int {
		switch rng.IntN(10) {
		case 0:
			return directMax + rng.IntN(64<<10) // too large for a direct append
		case 1:
			return directBlock - recHdrSize // a record that fills a block exactly
		case 2, 3:
			return rng.IntN(200 << 10)
		default:
			return 1 + rng.IntN(6000)
		}
	}
	l := open()
	for round := 0; round < 3; round++ {
		for i := 0; i < 150; i++ {
			bodies := make([][]byte, 1+rng.IntN(3))
			for j := range bodies {
				bodies[j] = make([]byte, size())
				for k := range bodies[j] {
					bodies[j][k] = byte(rng.Uint32())
				}
			}
			sync := rng.IntN(4) != 0
			if err := l.append(seq, bodies, sync); err != nil {
				t.Fatal(err)
			}
			for j, b := range bodies {
				want[seq+uint64(j)] = b
			}
			seq += uint64(len(bodies))
			appends++
		}
		switch {
		case l.direct.refused && !refused:
			t.Logf("this file system refuses O_DIRECT: the appends were buffered")
			fsRefuses = true
		case refused && !l.direct.refused:
			t.Fatal("O_DIRECT was refused, and the log did not take note")
		}
		direct += l.direct.writes.Load()
		l.hot.reset() // read the bodies from the segments
		check(l, "before close")
		l.close()
		l = open()
		check(l, "reopened")
	}
	l.close()
	switch {
	case refused && direct != 0:
		t.Fatalf("%d appends went direct where O_DIRECT was refused", direct)
	case !refused && direct == 0 && !fsRefuses:
		t.Fatal("no append went through O_DIRECT")
	}
	t.Logf("%d of %d appends written direct", direct, appends)
}
