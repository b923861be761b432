package fstest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Workload is a randomized, concurrent mix of every mutation over a small
// shared set of names, so writers collide: overlapping writes to shared
// files, renames racing writes, hard links, truncates, O_APPEND through
// links, unlink while open, and files created and deleted in one batch.
type Workload struct {
	Vol      string
	names    []string
	dirs     []string
	dataOnly bool
}

func NewWorkload(vol string, dataOnly bool) *Workload {
	w := &Workload{Vol: vol, dataOnly: dataOnly, dirs: []string{".", "d0", "d1", "d0/e"}}
	for _, d := range w.dirs {
		for i := 0; i < 6; i++ {
			w.names = append(w.names, filepath.Join(d, fmt.Sprintf("f%d", i)))
		}
	}
	return w
}

// Seed lays out the starting state: files, pre-existing hard links.
func (w *Workload) Seed(vol string) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, d := range w.dirs[1:] {
		os.MkdirAll(filepath.Join(vol, d), 0o755)
	}
	for i, n := range w.names {
		if i%3 == 0 {
			os.WriteFile(filepath.Join(vol, n), randBytes(r, 1+r.IntN(20000)), 0o644)
		}
	}
	os.Link(filepath.Join(vol, w.names[0]), filepath.Join(vol, "d1", "prelink"))
	os.Link(filepath.Join(vol, w.names[3]), filepath.Join(vol, "d0/e", "prelink"))
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	return b
}

func (w *Workload) p(name string) string { return filepath.Join(w.Vol, name) }

func (w *Workload) pick(r *rand.Rand) string {
	if r.IntN(8) == 0 {
		return filepath.Join(w.dirs[r.IntN(len(w.dirs))], "prelink")
	}
	return w.names[r.IntN(len(w.names))]
}

// Step performs one random operation; errors such as ENOENT are part of
// the game and ignored.
func (w *Workload) Step(r *rand.Rand) {
	n := w.pick(r)
	op := r.IntN(100)
	if w.dataOnly {
		op = op % 30
	}
	switch {
	case op < 40:
		w.dataStep(r, n, op)
	case op < 76:
		w.nameStep(r, n, op)
	default:
		w.metaStep(r, n, op)
	}
}

// dataStep writes, appends, truncates or rewrites a file (op below 40).
func (w *Workload) dataStep(r *rand.Rand, n string, op int) {
	switch {
	case op < 20: // overlapping pwrite
		if f, err := openNB(w.p(n), os.O_WRONLY); err == nil {
			f.WriteAt(randBytes(r, 1+r.IntN(9000)), int64(r.IntN(30000)))
			f.Close()
		}
	case op < 25: // O_APPEND, possibly through a hard link
		if f, err := openNB(w.p(n), os.O_WRONLY|os.O_APPEND); err == nil {
			f.Write(randBytes(r, 1+r.IntN(3000)))
			f.Close()
		}
	case op < 30: // truncate
		os.Truncate(w.p(n), int64(r.IntN(25000)))
	case op < 40: // create or O_TRUNC rewrite
		writeFile(w.p(n), randBytes(r, r.IntN(12000)), 0o644)
	}
}

// nameStep renames, links, unlinks or replaces a name (op 40 to 75).
func (w *Workload) nameStep(r *rand.Rand, n string, op int) {
	switch {
	case op < 47: // rename, racing writers
		os.Rename(w.p(n), w.p(w.pick(r)))
	case op < 50: // RENAME_EXCHANGE, RENAME_WHITEOUT (fsstress does both)
		flags := []uint{unix.RENAME_EXCHANGE, unix.RENAME_WHITEOUT, unix.RENAME_NOREPLACE}[r.IntN(3)]
		unix.Renameat2(unix.AT_FDCWD, w.p(n), unix.AT_FDCWD, w.p(w.pick(r)), flags)
	case op < 56: // hard link
		os.Link(w.p(n), w.p(w.pick(r)))
	case op < 62: // unlink
		os.Remove(w.p(n))
	case op < 70: // unlink while open, then keep writing through the fd
		if f, err := openNB(w.p(n), os.O_RDWR); err == nil {
			f.WriteAt(randBytes(r, 100), int64(r.IntN(5000)))
			os.Remove(w.p(n))
			f.WriteAt(randBytes(r, 1+r.IntN(4000)), int64(r.IntN(20000)))
			f.Truncate(int64(r.IntN(20000)))
			f.Close()
		}
	case op < 76: // temp file created, written and deleted (in one batch, usually)
		tmp := w.p(n) + ".tmp"
		writeFile(tmp, randBytes(r, 5000), 0o600)
		if r.IntN(2) == 0 {
			os.Rename(tmp, w.p(n)) // atomic replace
		} else {
			os.Remove(tmp)
		}
	}
}

// metaStep changes a mode, an xattr, an owner, times or allocation, or
// makes symlinks, directories and special files (op 76 and above).
func (w *Workload) metaStep(r *rand.Rand, n string, op int) {
	switch {
	case op < 80: // chmod
		os.Chmod(w.p(n), os.FileMode(0o600+r.IntN(0o177)))
	case op < 84: // xattr, also trusted.* on symlinks and special files
		if r.IntN(4) == 0 {
			unix.Lsetxattr(w.p(n), "trusted.t", randBytes(r, r.IntN(50)), 0)
		} else if r.IntN(5) == 0 {
			unix.Lremovexattr(w.p(n), fmt.Sprintf("user.k%d", r.IntN(3)))
		} else {
			unix.Setxattr(w.p(n), fmt.Sprintf("user.k%d", r.IntN(3)), randBytes(r, r.IntN(50)), r.IntN(3))
		}
	case op < 88: // symlink
		os.Symlink(fmt.Sprintf("target-%d", r.IntN(5)), w.p(n))
	case op < 92: // directory churn, with special files in it
		d := w.p(n) + ".d"
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, "inner"), []byte("x"), 0o644)
		unix.Mknod(filepath.Join(d, "fifo"), unix.S_IFIFO|0o644, 0)
		unix.Mknod(filepath.Join(d, "chr"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))
		os.Remove(filepath.Join(d, "fifo"))
		os.Remove(filepath.Join(d, "chr"))
		if r.IntN(2) == 0 {
			os.Remove(filepath.Join(d, "inner"))
			os.Remove(d)
		}
	case op < 96: // chown
		os.Lchown(w.p(n), r.IntN(3)*1000, r.IntN(3)*1000)
	case op < 98: // fallocate: allocate, keep size, punch a hole, zero a range
		if f, err := openNB(w.p(n), os.O_RDWR); err == nil {
			modes := []uint32{0, unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_ZERO_RANGE}
			mode := modes[r.IntN(len(modes))]
			unix.Fallocate(int(f.Fd()), mode, int64(r.IntN(20000)), int64(1+r.IntN(8000)))
			f.Close()
		}
	default: // utimens, or a special file in place of a name
		if r.IntN(2) == 0 {
			when := time.Unix(int64(r.IntN(2e9)), int64(r.IntN(1e9)))
			os.Chtimes(w.p(n), when, when)
		} else {
			unix.Mknod(w.p(n), []uint32{unix.S_IFIFO, unix.S_IFCHR, unix.S_IFSOCK}[r.IntN(3)]|0o640, 0)
		}
	}
}

// Run drives workers goroutines of steps steps each (seeded), while another
// goroutine calls barrier at random moments; midway, if set, runs once in
// the middle of worker 0's steps.
func (w *Workload) Run(seed uint64, workers, steps int, barrier, midway func()) {
	var wg sync.WaitGroup
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		// Run returns only once no barrier is under way: a test may kill
		// the primary next.
		defer close(stopped)
		r := rand.New(rand.NewPCG(seed, 99))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(r.IntN(3000)) * time.Microsecond):
				barrier()
			}
		}
	}()
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			for s := 0; s < steps; s++ {
				w.Step(r)
				if i == 0 && s == steps/2 && midway != nil {
					midway()
				}
			}
		}(i)
	}
	wg.Wait()
	close(stop)
	<-stopped
}

// openNB opens p without blocking: the workload turns names into FIFOs,
// and an open for writing of a FIFO without a reader would wait forever.
// A name that is not a regular file is not written.
func openNB(p string, flag int) (*os.File, error) {
	f, err := os.OpenFile(p, flag|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, os.ErrInvalid
	}
	return f, nil
}

// writeFile is os.WriteFile through openNB.
func writeFile(p string, data []byte, perm os.FileMode) {
	if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NONBLOCK, perm); err == nil {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			f.Write(data)
		}
		f.Close()
	}
}
