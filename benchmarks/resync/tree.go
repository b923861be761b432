package main

import (
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"

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
