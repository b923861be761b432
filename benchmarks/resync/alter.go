package main

import (
	"bytes"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

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
