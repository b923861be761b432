package capture_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/capture"
	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
)

// These tests drive capture.FS directly, as the kernel would through the
// FUSE binding, with no mount: they need neither /dev/fuse nor root, so
// the race detector and coverage reach the capture core. Several
// goroutines run the randomized workload while another seals at random
// moments; every sealed batch goes through the encoder and decoder, is
// applied to a copy of the starting state, and the copy must end equal to
// the volume, byte for byte.

// kernel resolves paths to nodes through Lookup, as the kernel does.
type kernel struct {
	fs     *capture.FS
	caller capture.Caller
}

func (k *kernel) walk(p string) (*capture.Node, error) {
	n := k.fs.Root()
	if p == "." {
		return n, nil
	}
	for _, c := range strings.Split(p, "/") {
		next, _, err := k.fs.Lookup(n, c)
		if err != nil {
			return nil, err
		}
		n = next
	}
	return n, nil
}

func (k *kernel) parent(p string) (*capture.Node, string, error) {
	n, err := k.walk(path.Dir(p))
	return n, path.Base(p), err
}

// open opens p (creating it with create), as open(2) would.
func (k *kernel) open(p string, flags int, create bool) (*capture.Handle, error) {
	if create {
		dir, name, err := k.parent(p)
		if err != nil {
			return nil, err
		}
		_, h, _, err := k.fs.Create(dir, name, flags|unix.O_CREAT, 0o644, k.caller, false)
		return h, err
	}
	n, err := k.walk(p)
	if err != nil {
		return nil, err
	}
	return k.fs.Open(n, flags, nil)
}

func (k *kernel) writeAt(p string, flags int, off int64, data []byte, create bool) {
	h, err := k.open(p, flags, create)
	if err != nil {
		return
	}
	k.fs.Write(h, off, data, nil)
	k.fs.Release(h)
}

var names = func() []string {
	var out []string
	for _, d := range []string{".", "d0", "d1", "d0/e"} {
		for i := 0; i < 6; i++ {
			out = append(out, path.Join(d, fmt.Sprintf("f%d", i)))
		}
	}
	return out
}()

func pick(r *rand.Rand) string {
	if r.IntN(8) == 0 {
		return []string{"d1/prelink", "d0/e/prelink"}[r.IntN(2)]
	}
	return names[r.IntN(len(names))]
}

func bytesOf(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	return b
}

// step runs one random operation; failures (ENOENT and the like) are
// part of the game.
func (k *kernel) step(r *rand.Rand) {
	p, q := pick(r), pick(r)
	switch op := r.IntN(100); {
	case op < 20:
		k.writeAt(p, unix.O_WRONLY, int64(r.IntN(30000)), bytesOf(r, 1+r.IntN(9000)), false)
	case op < 25:
		k.writeAt(p, unix.O_WRONLY|unix.O_APPEND, 0, bytesOf(r, 1+r.IntN(3000)), false)
	case op < 30:
		if n, err := k.walk(p); err == nil && !n.IsDir() {
			size := uint64(r.IntN(25000))
			k.fs.Setattr(n, capture.SetattrIn{Size: &size})
		}
	case op < 40:
		k.writeAt(p, unix.O_WRONLY|unix.O_TRUNC, 0, bytesOf(r, r.IntN(12000)), true)
	case op < 47:
		if a, an, err := k.parent(p); err == nil {
			if b, bn, err := k.parent(q); err == nil {
				flags := []uint32{0, 0, unix.RENAME_EXCHANGE, unix.RENAME_NOREPLACE, unix.RENAME_WHITEOUT}[r.IntN(5)]
				k.fs.Rename(a, an, b, bn, flags)
			}
		}
	case op < 53:
		if n, err := k.walk(p); err == nil {
			if b, bn, err := k.parent(q); err == nil {
				k.fs.Link(n, b, bn)
			}
		}
	case op < 60:
		if a, an, err := k.parent(p); err == nil {
			k.fs.Remove(a, an, false)
		}
	case op < 68: // unlink while open, and keep writing
		if h, err := k.open(p, unix.O_RDWR, false); err == nil {
			k.fs.Write(h, int64(r.IntN(5000)), bytesOf(r, 100), nil)
			if a, an, err := k.parent(p); err == nil {
				k.fs.Remove(a, an, false)
			}
			k.fs.Write(h, int64(r.IntN(20000)), bytesOf(r, 1+r.IntN(4000)), nil)
			k.fs.Release(h)
		}
	case op < 74: // a temporary, renamed over the name or removed
		tmp := p + ".tmp"
		k.writeAt(tmp, unix.O_WRONLY|unix.O_TRUNC, 0, bytesOf(r, 5000), true)
		if a, an, err := k.parent(tmp); err == nil {
			if r.IntN(2) == 0 {
				if b, bn, err := k.parent(p); err == nil {
					k.fs.Rename(a, an, b, bn, 0)
				}
			} else {
				k.fs.Remove(a, an, false)
			}
		}
	case op < 78:
		if n, err := k.walk(p); err == nil {
			mode := uint32(0o600 + r.IntN(0o177))
			k.fs.Setattr(n, capture.SetattrIn{Mode: &mode})
		}
	case op < 82:
		if n, err := k.walk(p); err == nil {
			name := fmt.Sprintf("user.k%d", r.IntN(3))
			if r.IntN(3) == 0 {
				k.fs.Removexattr(n, name)
			} else {
				k.fs.Setxattr(n, name, bytesOf(r, r.IntN(50)), r.IntN(3), false)
			}
		}
	case op < 86:
		if a, an, err := k.parent(p); err == nil {
			k.fs.Symlink(a, an, fmt.Sprintf("target-%d", r.IntN(5)), k.caller)
		}
	case op < 90: // directory churn
		if a, an, err := k.parent(p); err == nil {
			if d, _, err := k.fs.Mkdir(a, an+".d", 0o755, k.caller); err == nil {
				k.fs.Mknod(d, "fifo", unix.S_IFIFO|0o644, 0, k.caller)
				if r.IntN(2) == 0 {
					k.fs.Remove(d, "fifo", false)
					k.fs.Remove(a, an+".d", true)
				}
			}
		}
	case op < 94:
		if n, err := k.walk(p); err == nil {
			at, mt := time.Unix(int64(r.IntN(1e9)), 0), time.Unix(int64(r.IntN(1e9)), int64(r.IntN(1e9)))
			k.fs.Setattr(n, capture.SetattrIn{Atime: &at, Mtime: &mt})
		}
	default:
		if h, err := k.open(p, unix.O_RDWR, false); err == nil {
			modes := []uint32{0, unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_ZERO_RANGE}
			k.fs.Fallocate(h, modes[r.IntN(len(modes))], uint64(r.IntN(20000)), uint64(1+r.IntN(8000)), nil)
			k.fs.Release(h)
		}
	}
}

// sealer seals the open batch, encodes it as the journal would, decodes it
// and keeps it for the replay.
type sealer struct {
	mu      sync.Mutex
	fs      *capture.FS
	batches []*journal.Batch
	seq     uint64
}

func (s *sealer) seal(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sealed := s.fs.Seal()
	defer sealed.Release()
	for i, ops := range journal.Split(sealed.Ops) {
		s.seq++
		enc, _, err := journal.Encode(&journal.Batch{Seq: s.seq, Ops: ops, More: i < len(journal.Split(sealed.Ops))-1})
		if err != nil {
			t.Errorf("a sealed batch does not encode: %v", err)
			return
		}
		b, err := journal.Decode(enc)
		if err != nil {
			t.Errorf("a sealed batch does not decode: %v", err)
			return
		}
		s.batches = append(s.batches, b)
	}
}

// replay applies every batch sealed so far to start, a copy of the
// volume's starting state.
func (s *sealer) replay(t *testing.T, start string) {
	t.Helper()
	a, err := apply.New(start, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, b := range s.batches {
		if err := a.Apply(b); err != nil {
			t.Fatalf("apply %d: %v", b.Seq, err)
		}
	}
}

func TestCaptureReplaysWithoutFUSE(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { driveSeed(t, seed, nil) })
	}
}

// seeded serves a seeded volume (vol) through a capture.FS made with o,
// closed at cleanup, and copies the seed to start for a replay.
func seeded(t *testing.T, o capture.Options) (k *kernel, vol, start string) {
	dir := t.TempDir()
	vol, start = filepath.Join(dir, "vol"), filepath.Join(dir, "start")
	os.Mkdir(vol, 0o755)
	os.Mkdir(start, 0o755)
	fstest.NewWorkload("", false).Seed(vol)
	fstest.CopyTree(t, vol, start)
	rootFd, err := unix.Open(vol, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := capture.New(rootFd, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &kernel{fs: f, caller: capture.Caller{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}}, vol, start
}

// driveSeed runs the workload with seed; with classify set, local-only
// paths must appear in no batch and are left out of the comparison.
func driveSeed(t *testing.T, seed uint64, classify capture.Classifier) {
	k, vol, start := seeded(t, capture.Options{Capture: true, WriteDiff: seed%2 == 0, Classify: classify})
	f := k.fs
	s := &sealer{fs: f}
	stop := make(chan struct{})
	sealed := make(chan struct{})
	go func() {
		defer close(sealed)
		r := rand.New(rand.NewPCG(seed, 99))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(r.IntN(2000)) * time.Microsecond):
				s.seal(t)
			}
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; i < 400; i++ {
				k.step(r)
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	<-sealed
	s.seal(t)
	s.replay(t, start)
	want, got := fstest.Snapshot(t, vol), fstest.Snapshot(t, start)
	if classify != nil {
		for _, b := range s.batches {
			for _, op := range b.Ops {
				for _, p := range []string{op.Path, op.Path2} {
					if p != "" && f.Local(p) {
						t.Fatalf("a local-only path was journaled: %s %s", op.Kind, op.Path)
					}
				}
			}
		}
		for _, tree := range []fstest.Tree{want, got} {
			for p := range tree {
				if f.Local(p) {
					delete(tree, p)
				}
			}
		}
	}
	fstest.RequireEqual(t, want, got, "replay vs volume")
}
