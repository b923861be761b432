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
	v := &volumeBuilder{
		dir:  dir,
		rng:  mrand.New(mrand.NewPCG(s.seed, 1)),
		data: randReader{mrand.NewChaCha8([32]byte{byte(s.seed), 'p', 'b', 'f', 's'})},
		b:    &built{},
	}
	if err := v.makeDirs(s.dirs); err != nil {
		return nil, err
	}
	if err := v.writeLarge(s.bytes * 6 / 10); err != nil {
		return nil, err
	}
	if err := v.writeMedium(s.bytes * 2 / 10); err != nil {
		return nil, err
	}
	nSmall := s.files - nLarge - nMedium - nLinks
	if nSmall < 1 {
		return nil, fmt.Errorf("-files %d is too few", s.files)
	}
	smalls, err := v.writeSmall(nSmall, s.bytes*2/10)
	if err != nil {
		return nil, err
	}
	if err := v.linkAndTag(smalls); err != nil {
		return nil, err
	}
	return v.b, syncfs(dir)
}

// The volume's counts of large and medium files, and of hard links,
// symlinks and xattrs among the small ones.
const (
	nLarge, nMedium            = 16, 400
	nLinks, nSymlinks, nXattrs = 20, 40, 100
)

// volumeBuilder is buildVolume's state: the random sources of names, sizes
// and bytes, the leaf directories made, and the counts so far.
type volumeBuilder struct {
	dir    string
	rng    *mrand.Rand
	data   randReader
	b      *built
	leaves []string // relative to dir
}

// modes are the modes of medium and small files, in turn.
var modes = []os.FileMode{0o644, 0o644, 0o644, 0o600, 0o755}

// makeDirs makes the leaf directories, ten to a parent, and db/.
func (v *volumeBuilder) makeDirs(n int) error {
	for i := 0; len(v.leaves) < n; i++ {
		top := fmt.Sprintf("d%03d", i)
		if err := os.Mkdir(filepath.Join(v.dir, top), 0o755); err != nil {
			return err
		}
		v.b.dirs++
		for j := 0; j < 10 && len(v.leaves) < n; j++ {
			leaf := filepath.Join(top, fmt.Sprintf("s%02d", j))
			if err := os.Mkdir(filepath.Join(v.dir, leaf), 0o755); err != nil {
				return err
			}
			v.leaves = append(v.leaves, leaf)
			v.b.dirs++
		}
	}
	if err := os.Mkdir(filepath.Join(v.dir, "db"), 0o750); err != nil {
		return err
	}
	v.b.dirs++
	return nil
}

// write creates a file of size random bytes.
func (v *volumeBuilder) write(rel string, size int64, mode os.FileMode) error {
	f, err := os.OpenFile(filepath.Join(v.dir, rel), os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, v.data, size); err != nil {
		f.Close()
		return err
	}
	v.b.files++
	v.b.bytes += size
	return f.Close()
}

// writeLarge writes nLarge files of equal size, about total bytes
// together; the first half under db/, for the writer.
func (v *volumeBuilder) writeLarge(total int64) error {
	b := v.b
	large := total / nLarge
	large -= large % 4096
	for i := 0; i < nLarge; i++ {
		rel := filepath.Join(v.leaves[v.rng.IntN(len(v.leaves))], fmt.Sprintf("large-%02d.bin", i))
		if i < nLarge/2 {
			rel = filepath.Join("db", fmt.Sprintf("table-%02d.db", i))
			b.dbFiles = append(b.dbFiles, rel)
		}
		if err := v.write(rel, large, 0o640); err != nil {
			return err
		}
		b.large++
		b.largeBytes += large
	}
	return nil
}

// writeMedium writes nMedium files of random sizes, about total bytes
// together.
func (v *volumeBuilder) writeMedium(total int64) error {
	medAvg := total / nMedium
	for i := 0; i < nMedium; i++ {
		size := medAvg/4 + v.rng.Int64N(medAvg*3/2+1)
		if err := v.write(filepath.Join(v.leaves[i%len(v.leaves)], fmt.Sprintf("medium-%03d.dat", i)), size, modes[i%len(modes)]); err != nil {
			return err
		}
		v.b.medium++
		v.b.mediumBytes += size
	}
	return nil
}

// writeSmall writes n small files, about total bytes together, and
// returns their paths.
func (v *volumeBuilder) writeSmall(n int, total int64) ([]string, error) {
	smallAvg := total / int64(n)
	var smalls []string
	for i := 0; i < n; i++ {
		rel := filepath.Join(v.leaves[i%len(v.leaves)], fmt.Sprintf("f%05d.txt", i))
		size := v.rng.Int64N(2*smallAvg + 1)
		if err := v.write(rel, size, modes[i%len(modes)]); err != nil {
			return nil, err
		}
		smalls = append(smalls, rel)
		v.b.small++
		v.b.smallBytes += size
	}
	return smalls, nil
}

// linkAndTag adds hard links to random small files, symlinks to them and
// user xattrs on them.
func (v *volumeBuilder) linkAndTag(smalls []string) error {
	dir, rng, b := v.dir, v.rng, v.b
	for i := 0; i < nLinks; i++ {
		src := smalls[rng.IntN(len(smalls))]
		if err := os.Link(filepath.Join(dir, src), filepath.Join(dir, src+fmt.Sprintf(".link%d", i))); err != nil {
			return err
		}
		b.files++
		b.hardlinks++
	}
	for i := 0; i < nSymlinks; i++ {
		target := smalls[rng.IntN(len(smalls))]
		rel := filepath.Join(v.leaves[rng.IntN(len(v.leaves))], fmt.Sprintf("sym%02d", i))
		rt, _ := filepath.Rel(filepath.Dir(rel), target)
		if err := os.Symlink(rt, filepath.Join(dir, rel)); err != nil {
			return err
		}
		b.symlinks++
	}
	for i := 0; i < nXattrs; i++ {
		p := filepath.Join(dir, smalls[rng.IntN(len(smalls))])
		if err := unix.Setxattr(p, "user.bench", []byte(fmt.Sprintf("value-%d", i)), 0); err != nil {
			return fmt.Errorf("setxattr: %w", err)
		}
		b.xattrs++
	}
	return nil
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
	files, larges, err := alterable(dir)
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
	if a.overwritten, err = overwriteSome(dir, take(n*75/100), rng); err != nil {
		return a, err
	}
	if a.largeBlocks, err = overwriteLarge(dir, larges[:min(len(larges), max(1, n*2/100))]); err != nil {
		return a, err
	}
	if a.appended, err = appendSome(dir, take(n*8/100)); err != nil {
		return a, err
	}
	for _, rel := range take(n * 5 / 100) {
		if err := os.Remove(filepath.Join(dir, rel)); err != nil {
			return a, err
		}
		a.deleted++
	}
	for i, rel := range take(n * 5 / 100) {
		if err := os.WriteFile(filepath.Join(dir, filepath.Dir(rel), fmt.Sprintf("intruder-%d", i)), alterJunk, 0o644); err != nil {
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

// alterJunk is what alterBackup writes: 1,000 bytes, or the first 16 or
// 100 of them.
var alterJunk = bytes.Repeat([]byte("ALTERED!"), 125)

// alterable lists the regular files alterBackup may change, relative to
// dir: the large ones and the others, hard links left out. The writer's
// files (db/ and w*/) are left alone.
func alterable(dir string) (files, larges []string, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
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
	return files, larges, err
}

// overwriteSome overwrites 16 bytes of each file at a random offset (the
// whole file when it is shorter) and returns how many it changed.
func overwriteSome(dir string, rels []string, rng *mrand.Rand) (int, error) {
	n := 0
	for _, rel := range rels {
		p := filepath.Join(dir, rel)
		fi, err := os.Stat(p)
		if err != nil {
			return n, err
		}
		if fi.Size() < 16 {
			if err := os.WriteFile(p, alterJunk[:16], fi.Mode()); err != nil {
				return n, err
			}
		} else if err := writeAt(p, alterJunk[:16], rng.Int64N(fi.Size()-15)); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// overwriteLarge overwrites 100 bytes in the middle of each file.
func overwriteLarge(dir string, rels []string) (int, error) {
	n := 0
	for _, rel := range rels {
		p := filepath.Join(dir, rel)
		fi, err := os.Stat(p)
		if err != nil {
			return n, err
		}
		if err := writeAt(p, alterJunk[:100], fi.Size()/2); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// appendSome appends 1,000 bytes to each file.
func appendSome(dir string, rels []string) (int, error) {
	n := 0
	for _, rel := range rels {
		f, err := os.OpenFile(filepath.Join(dir, rel), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return n, err
		}
		_, err = f.Write(alterJunk)
		f.Close()
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
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
