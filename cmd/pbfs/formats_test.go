package main

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
)

// Every on-disk journal format this code has written is kept under
// journal/testdata/formats, each made by the pbfs of its time
// (make-journal.sh) with the volume it left (tree.txt). This build must
// open, verify and replay each one to the same volume, and a mount must
// take it over: a format change that orphans old journals fails here.
func TestOldJournalFormats(t *testing.T) {
	dirs, err := filepath.Glob("../../journal/testdata/formats/*/journal.tar.gz")
	must(t, err)
	if len(dirs) < 3 {
		t.Fatalf("only %d example journals found", len(dirs))
	}
	for _, tarball := range dirs {
		name := filepath.Base(filepath.Dir(tarball))
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if out, err := exec.Command("tar", "-C", dir, "-xzf", tarball).CombinedOutput(); err != nil {
				t.Fatalf("untar: %v\n%s", err, out)
			}
			jdir, target := filepath.Join(dir, "j"), filepath.Join(dir, "vol")
			must(t, os.Mkdir(target, 0o755))
			if out, code := run(t, "journal", "verify", "--journal", jdir); code != 0 {
				t.Fatalf("journal verify: exit %d:\n%s", code, out)
			}
			if out, code := run(t, "journal", "replay", "--journal", jdir, target); code != 0 {
				t.Fatalf("journal replay: exit %d:\n%s", code, out)
			}
			want, err := os.ReadFile(filepath.Join(filepath.Dir(tarball), "tree.txt"))
			must(t, err)
			if got := treeLines(t, target); got != normalize(string(want)) {
				t.Fatalf("the replayed volume differs from the one the journal's pbfs left:\ngot:\n%s\nwant:\n%s", got, want)
			}
			// A mount takes the journal over (migrating it) and stops cleanly.
			fstest.RequireFUSE(t)
			p := startMount(t, nil, target, jdir)
			must(t, os.WriteFile(filepath.Join(target, "after"), []byte("written by this build"), 0o644))
			p.Barrier()
			p.Stop()
			if out, code := run(t, "journal", "verify", "--journal", jdir); code != 0 || strings.Contains(out, "format 1") {
				t.Fatalf("journal verify after a mount of this build: exit %d:\n%s", code, out)
			}
		})
	}
}

// treeLines lists dir as make-journal.sh's tree.txt does: each path with
// its type, mode, size, owner, a content hash and user xattrs.
func treeLines(t *testing.T, dir string) string {
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel := "./" + strings.TrimPrefix(p, dir+"/")
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			lines = append(lines, fmt.Sprintf("%s link %s", rel, target))
		case fi.IsDir():
			lines = append(lines, fmt.Sprintf("%s dir %o", rel, fi.Mode().Perm()))
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			lines = append(lines, fmt.Sprintf("%s file %o %d %d:%d %x %s", rel, fi.Mode().Perm(), fi.Size(), st.Uid, st.Gid, sha256.Sum256(data), userXattrs(p)))
		}
		return nil
	})
	must(t, err)
	sort.Strings(lines)
	return normalize(strings.Join(lines, "\n"))
}

func userXattrs(p string) string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return ""
	}
	var out []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		v := make([]byte, 4096)
		if m, err := unix.Lgetxattr(p, name, v); err == nil {
			out = append(out, fmt.Sprintf("%s=%q", name, v[:m]))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// normalize trims each line and cuts content hashes to the 16 hex digits
// tree.txt keeps.
func normalize(s string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && f[1] == "file" && len(f[5]) > 16 {
			f[5] = f[5][:16]
		}
		out = append(out, strings.Join(f, " "))
	}
	return strings.Join(out, "\n")
}
