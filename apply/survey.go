package apply

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A targeted resync reconciles only the paths two histories touched since
// they parted (replicate/primary/resync_scope.go). What a backup's journal does
// not say of its volume, a walk of the volume does: the names that hold
// one file between them (reconciling one name of a file writes them all),
// the paths a deposed primary changed after its last journaled batch
// (their inode's ctime moved, which no one can set back), and the paths
// that were local-only on it.

// SurveyOptions says what a Survey looks for besides hard links.
type SurveyOptions struct {
	// Since, if set: report every entry whose ctime is at or after it.
	Since time.Time
	// Local, if set, names the paths that are local-only: reported and
	// not descended into.
	Local func(path string) bool
}

// Survey is what a walk of the volume found.
type Survey struct {
	Entries int
	// Changed: entries other than directories whose ctime is at or after
	// Since (a new inode, new data or attributes, or a name added or
	// removed, which changes the link count).
	Changed []string
	// ChangedDirs: directories whose ctime is at or after Since (a name
	// added or removed, or their attributes), with the names they hold.
	ChangedDirs map[string][]string
	// Local: local-only paths.
	Local []string
	// Links: every name of each file (not directory) with more than one.
	Links map[uint64][]string
}

// Survey walks the volume, never into what is not the volume's (another
// file system, the backup's journal).
func (a *Applier) Survey(opt SurveyOptions) (*Survey, error) {
	root, err := a.root.Open(".")
	if err != nil {
		return nil, fmt.Errorf("survey the volume: %w", err)
	}
	defer root.Close()
	s := &Survey{ChangedDirs: map[string][]string{}, Links: map[uint64][]string{}}
	var since int64
	if !opt.Since.IsZero() {
		since = max(opt.Since.UnixNano(), 1)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(root.Fd()), &st); err != nil {
		return nil, fmt.Errorf("survey the volume: %w", err)
	}
	w := &surveyWalk{a: a, s: s, opt: opt, since: since}
	if err := w.dir(root, ".", &st); err != nil {
		return nil, fmt.Errorf("survey the volume: %w", err)
	}
	return s, nil
}

type surveyWalk struct {
	a     *Applier
	s     *Survey
	opt   SurveyOptions
	since int64
}

func (w *surveyWalk) changed(st *unix.Stat_t) bool {
	return w.since != 0 && st.Ctim.Nano() >= w.since
}

// dir surveys the directory open as d, at p, whose stat is st.
func (w *surveyWalk) dir(d *os.File, p string, st *unix.Stat_t) error {
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list %s: %w", p, err)
	}
	if w.changed(st) {
		w.s.ChangedDirs[p] = names
	}
	fd := int(d.Fd())
	for _, name := range names {
		q := childOf(p, name)
		var cst unix.Stat_t
		if err := unix.Fstatat(fd, name, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("stat %s: %w", q, err)
		}
		w.s.Entries++
		if w.opt.Local != nil && w.opt.Local(q) {
			w.s.Local = append(w.s.Local, q)
			continue
		}
		if cst.Mode&unix.S_IFMT != unix.S_IFDIR {
			if w.changed(&cst) {
				w.s.Changed = append(w.s.Changed, q)
			}
			if cst.Nlink > 1 {
				w.s.Links[cst.Ino] = append(w.s.Links[cst.Ino], q)
			}
			continue
		}
		if err := w.sub(fd, name, q, &cst); err != nil {
			return err
		}
	}
	return nil
}

// sub surveys the directory name in the directory open as fd.
func (w *surveyWalk) sub(fd int, name, q string, st *unix.Stat_t) error {
	if w.a.foreign(statT(st)) != "" {
		return nil // not the volume's: a resync never touches it
	}
	cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", q, err)
	}
	c := os.NewFile(uintptr(cfd), q)
	defer c.Close()
	return w.dir(c, q, st)
}

// statT is what foreign reads of st.
func statT(st *unix.Stat_t) *syscall.Stat_t {
	return &syscall.Stat_t{Dev: st.Dev, Ino: st.Ino}
}
