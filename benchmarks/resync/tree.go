package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// volumeSpec is the shape of the volume part 1 builds.
type volumeSpec struct {
	files int   // regular file names, hard links included
	dirs  int   // leaf directories (plus one parent per ten)
	bytes int64 // total bytes of the regular files, about
	seed  uint64
}

// built describes what buildVolume made.
type built struct {
	files, dirs, symlinks, hardlinks, xattrs int
	bytes                                    int64
	large, medium, small                     int
	largeBytes, mediumBytes, smallBytes      int64
	dbFiles                                  []string // relative paths the writer overwrites
}

// randReader is a fast deterministic source of incompressible bytes.
type randReader struct{ r *mrand.ChaCha8 }

func (r randReader) Read(p []byte) (int, error) { return r.r.Read(p) }

// buildVolume fills dir with the spec's tree, directly on the backing file
// system (not through a mount): 60 % of the bytes in 16 large files (half
// of them under db/, which the writer overwrites), 20 % in 400 medium files
// of 64 KiB–1 MiB and 20 % in many small files of 0–2×avg bytes; a few
// symlinks, hard links and user xattrs; modes 0600, 0644 and 0755.
func buildVolume(dir string, s volumeSpec) (*built, error) {
	rng := mrand.New(mrand.NewPCG(s.seed, 1))
	data := randReader{mrand.NewChaCha8([32]byte{byte(s.seed), 'p', 'b', 'f', 's'})}
	b := &built{}
	var leaves []string
	for i := 0; len(leaves) < s.dirs; i++ {
		top := fmt.Sprintf("d%03d", i)
		if err := os.Mkdir(filepath.Join(dir, top), 0o755); err != nil {
			return nil, err
		}
		b.dirs++
		for j := 0; j < 10 && len(leaves) < s.dirs; j++ {
			leaf := filepath.Join(top, fmt.Sprintf("s%02d", j))
			if err := os.Mkdir(filepath.Join(dir, leaf), 0o755); err != nil {
				return nil, err
			}
			leaves = append(leaves, leaf)
			b.dirs++
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "db"), 0o750); err != nil {
		return nil, err
	}
	b.dirs++
	modes := []os.FileMode{0o644, 0o644, 0o644, 0o600, 0o755}
	write := func(rel string, size int64, mode os.FileMode) error {
		f, err := os.OpenFile(filepath.Join(dir, rel), os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
		if err != nil {
			return err
		}
		if _, err := io.CopyN(f, data, size); err != nil {
			f.Close()
			return err
		}
		b.files++
		b.bytes += size
		return f.Close()
	}
	const nLarge, nMedium = 16, 400
	large := s.bytes * 6 / 10 / nLarge
	large -= large % 4096
	for i := 0; i < nLarge; i++ {
		rel := filepath.Join(leaves[rng.IntN(len(leaves))], fmt.Sprintf("large-%02d.bin", i))
		if i < nLarge/2 {
			rel = filepath.Join("db", fmt.Sprintf("table-%02d.db", i))
			b.dbFiles = append(b.dbFiles, rel)
		}
		if err := write(rel, large, 0o640); err != nil {
			return nil, err
		}
		b.large++
		b.largeBytes += large
	}
	medAvg := s.bytes * 2 / 10 / nMedium
	for i := 0; i < nMedium; i++ {
		size := medAvg/4 + rng.Int64N(medAvg*3/2+1)
		if err := write(filepath.Join(leaves[i%len(leaves)], fmt.Sprintf("medium-%03d.dat", i)), size, modes[i%len(modes)]); err != nil {
			return nil, err
		}
		b.medium++
		b.mediumBytes += size
	}
	const nLinks, nSymlinks, nXattrs = 20, 40, 100
	nSmall := s.files - nLarge - nMedium - nLinks
	if nSmall < 1 {
		return nil, fmt.Errorf("-files %d is too few", s.files)
	}
	smallAvg := s.bytes * 2 / 10 / int64(nSmall)
	var smalls []string
	for i := 0; i < nSmall; i++ {
		rel := filepath.Join(leaves[i%len(leaves)], fmt.Sprintf("f%05d.txt", i))
		size := rng.Int64N(2*smallAvg + 1)
		if err := write(rel, size, modes[i%len(modes)]); err != nil {
			return nil, err
		}
		smalls = append(smalls, rel)
		b.small++
		b.smallBytes += size
	}
	for i := 0; i < nLinks; i++ {
		src := smalls[rng.IntN(len(smalls))]
		if err := os.Link(filepath.Join(dir, src), filepath.Join(dir, src+fmt.Sprintf(".link%d", i))); err != nil {
			return nil, err
		}
		b.files++
		b.hardlinks++
	}
	for i := 0; i < nSymlinks; i++ {
		target := smalls[rng.IntN(len(smalls))]
		rel := filepath.Join(leaves[rng.IntN(len(leaves))], fmt.Sprintf("sym%02d", i))
		rt, _ := filepath.Rel(filepath.Dir(rel), target)
		if err := os.Symlink(rt, filepath.Join(dir, rel)); err != nil {
			return nil, err
		}
		b.symlinks++
	}
	for i := 0; i < nXattrs; i++ {
		p := filepath.Join(dir, smalls[rng.IntN(len(smalls))])
		if err := unix.Setxattr(p, "user.bench", []byte(fmt.Sprintf("value-%d", i)), 0); err != nil {
			return nil, fmt.Errorf("setxattr: %w", err)
		}
		b.xattrs++
	}
	return b, syncfs(dir)
}

func syncfs(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// alteration counts what alterBackup did to a stopped backup's volume.
type alteration struct {
	overwritten, largeBlocks, appended, deleted, added, chmodded int
}

func (a alteration) total() int {
	return a.overwritten + a.largeBlocks + a.appended + a.deleted + a.added + a.chmodded
}

// alterBackup changes about frac of the regular files of a backup's volume
// behind its back: 75 % get 16 bytes overwritten in place, 2 % of them are
// large files that get 100 bytes overwritten in the middle, 8 % get 1,000
// bytes appended, 5 % are deleted, 5 % more are new files, and 5 % only
// change mode. The writer's files (db/ and w*/) are left alone.
func alterBackup(dir string, frac float64, seed uint64) (alteration, error) {
	var a alteration
	var files, larges []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() && (rel == "db" || strings.HasPrefix(rel, "w")) {
			return fs.SkipDir
		}
		if d.Type().IsRegular() {
			if strings.Contains(rel, "large-") {
				larges = append(larges, rel)
			} else if !strings.Contains(rel, ".link") {
				files = append(files, rel)
			}
		}
		return nil
	})
	if err != nil {
		return a, err
	}
	rng := mrand.New(mrand.NewPCG(seed, 2))
	rng.Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })
	n := int(float64(len(files)+len(larges)) * frac)
	take := func(k int) []string {
		k = min(k, len(files))
		out := files[:k]
		files = files[k:]
		return out
	}
	junk := bytes.Repeat([]byte("ALTERED!"), 125)
	for _, rel := range take(n * 75 / 100) {
		p := filepath.Join(dir, rel)
		fi, err := os.Stat(p)
		if err != nil {
			return a, err
		}
		if fi.Size() < 16 {
			if err := os.WriteFile(p, junk[:16], fi.Mode()); err != nil {
				return a, err
			}
		} else if err := writeAt(p, junk[:16], rng.Int64N(fi.Size()-15)); err != nil {
			return a, err
		}
		a.overwritten++
	}
	for _, rel := range larges[:min(len(larges), max(1, n*2/100))] {
		p := filepath.Join(dir, rel)
		fi, err := os.Stat(p)
		if err != nil {
			return a, err
		}
		if err := writeAt(p, junk[:100], fi.Size()/2); err != nil {
			return a, err
		}
		a.largeBlocks++
	}
	for _, rel := range take(n * 8 / 100) {
		f, err := os.OpenFile(filepath.Join(dir, rel), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return a, err
		}
		_, err = f.Write(junk)
		f.Close()
		if err != nil {
			return a, err
		}
		a.appended++
	}
	for _, rel := range take(n * 5 / 100) {
		if err := os.Remove(filepath.Join(dir, rel)); err != nil {
			return a, err
		}
		a.deleted++
	}
	for i, rel := range take(n * 5 / 100) {
		if err := os.WriteFile(filepath.Join(dir, filepath.Dir(rel), fmt.Sprintf("intruder-%d", i)), junk, 0o644); err != nil {
			return a, err
		}
		a.added++
	}
	for _, rel := range take(n * 5 / 100) {
		if err := os.Chmod(filepath.Join(dir, rel), 0o604); err != nil {
			return a, err
		}
		a.chmodded++
	}
	return a, syncfs(dir)
}

func writeAt(p string, b []byte, off int64) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// diskUse is the size of a directory's files: apparent (what `du -sb`
// reports: st_size) and allocated (st_blocks), with the apparent size split
// by kind: the batch log's segments (and its spare) and Badger's files.
type diskUse struct {
	apparent, allocated int64
	byKind              map[string]int64 // seg, vlog, sst, mem, other (apparent)
	allocByKind         map[string]int64
	files               int
}

func measureDisk(dir string) (diskUse, error) {
	u := diskUse{byKind: map[string]int64{}, allocByKind: map[string]int64{}}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // Badger removed it while we walked
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		u.apparent += st.Size
		u.allocated += st.Blocks * 512
		if d.IsDir() {
			return nil
		}
		kind := "other"
		if filepath.Base(filepath.Dir(p)) == "batches" {
			kind = "seg"
		}
		switch filepath.Ext(p) {
		case ".vlog":
			kind = "vlog"
		case ".sst":
			kind = "sst"
		case ".mem":
			kind = "mem"
		case ".sock":
			return nil
		}
		u.byKind[kind] += st.Size
		u.allocByKind[kind] += st.Blocks * 512
		u.files++
		return nil
	})
	return u, err
}
