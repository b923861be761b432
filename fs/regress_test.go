package fs_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/mount"
)

// Each test here reproduces, with one or a few threads, a way XDN's
// fuselog replays diverged from the primary.

// TestOverlappingWritesKeepOrder hammers one region of one file from
// several goroutines: capture records each write inside the same critical
// section as the pwrite, so the recorded order is the order they landed in.
func TestOverlappingWritesKeepOrder(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, nil)
		p := filepath.Join(e.Vol, "hot")
		must(t, os.WriteFile(p, nil, 0o644))
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				f, err := os.OpenFile(p, os.O_WRONLY, 0)
				if err != nil {
					t.Error(err)
					return
				}
				defer f.Close()
				r := rand.New(rand.NewPCG(uint64(g), 7))
				for i := 0; i < 1500; i++ {
					b := bytes.Repeat([]byte{byte('A' + g)}, 512+r.IntN(8192))
					f.WriteAt(b, int64(r.IntN(8192)))
					if i%300 == 0 && g == 0 {
						e.Barrier()
					}
				}
			}(g)
		}
		wg.Wait()
		e.CheckReplay()
	})
}

// TestUnlinkRecreateInOneBatch: `rm f; echo new > f` on a pre-existing
// file inside one batch. XDN's pruning dropped the new create and writes
// but kept the unlink, so f vanished on the replica.
func TestUnlinkRecreateInOneBatch(t *testing.T) {
	eachMount(t, mount.Config{SealInterval: 1 << 40}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			os.WriteFile(filepath.Join(vol, "f"), []byte("old contents"), 0o644)
		})
		p := filepath.Join(e.Vol, "f")
		must(t, os.Remove(p))
		must(t, os.WriteFile(p, []byte("new\n"), 0o644))
		e.CheckReplay()
		if got, _ := os.ReadFile(filepath.Join(e.Start, "f")); string(got) != "new\n" {
			t.Fatalf("replica f = %q", got)
		}
	})
}

// TestTempFileCreatedAndDeletedIsPruned checks a file created, written and
// deleted inside one batch leaves nothing in the journal but the new
// modification time of the directory it was in.
func TestTempFileCreatedAndDeletedIsPruned(t *testing.T) {
	eachMount(t, mount.Config{SealInterval: 1 << 40}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, nil)
		must(t, os.WriteFile(filepath.Join(e.Vol, "keep"), []byte("k"), 0o644))
		before := e.Barrier()
		tmp := filepath.Join(e.Vol, "tmp")
		must(t, os.Mkdir(filepath.Join(e.Vol, "scratch"), 0o755))
		must(t, os.WriteFile(filepath.Join(e.Vol, "scratch", "t"), bytes.Repeat([]byte("z"), 1<<20), 0o644))
		must(t, os.RemoveAll(filepath.Join(e.Vol, "scratch")))
		must(t, os.WriteFile(tmp, []byte("x"), 0o644))
		must(t, os.Remove(tmp))
		seq := e.Barrier()
		enc, err := e.Client.Get(seq)
		must(t, err)
		b, err := journal.Decode(enc)
		must(t, err)
		if seq != before+1 || len(b.Ops) != 1 || b.Ops[0].Kind != journal.KindUtimens || b.Ops[0].Path != "." {
			t.Fatalf("a batch of only temporaries: seq %d after %d, ops %v; want one utimens of the volume root", seq, before, b.Ops)
		}
		e.CheckReplay()
	})
}

// TestUnlinkOpenFileWithOtherLink: a pre-existing file has two names and
// the kernel has looked up only one. It is opened, that name is unlinked,
// and writes continue through the open file: they change the surviving
// name, so they must be captured under it. XDN did not record them.
func TestUnlinkOpenFileWithOtherLink(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			os.Mkdir(filepath.Join(vol, "deep"), 0o755)
			os.WriteFile(filepath.Join(vol, "a"), []byte("0123456789"), 0o644)
			os.Link(filepath.Join(vol, "a"), filepath.Join(vol, "deep", "b"))
		})
		f, err := os.OpenFile(filepath.Join(e.Vol, "a"), os.O_RDWR, 0)
		must(t, err)
		must(t, os.Remove(filepath.Join(e.Vol, "a")))
		_, err = f.WriteAt([]byte("WRITTEN-AFTER-UNLINK"), 5)
		must(t, err)
		must(t, f.Close())
		e.CheckReplay()
		if got, _ := os.ReadFile(filepath.Join(e.Start, "deep", "b")); string(got) != "01234WRITTEN-AFTER-UNLINK" {
			t.Fatalf("replica deep/b = %q", got)
		}
	})
}

// TestWriteCloseUnlinkWithOtherLink: as above, but the file is written
// and closed before its known name is removed (or renamed over), in the
// same batch, as `echo x >> a; rm a` does. The writes were dropped: the
// surviving name got a node of its own, and the seal found no name for
// the one the writes were pending on.
func TestWriteCloseUnlinkWithOtherLink(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			os.Mkdir(filepath.Join(vol, "deep"), 0o755)
			for _, n := range []string{"a", "c"} {
				os.WriteFile(filepath.Join(vol, n), []byte("0123456789"), 0o644)
				os.Link(filepath.Join(vol, n), filepath.Join(vol, "deep", n+"2"))
			}
		})
		for _, n := range []string{"a", "c"} {
			f, err := os.OpenFile(filepath.Join(e.Vol, n), os.O_RDWR, 0)
			must(t, err)
			_, err = f.WriteAt([]byte("-WRITTEN-"+n), 5)
			must(t, err)
			must(t, f.Close())
		}
		must(t, os.Remove(filepath.Join(e.Vol, "a")))
		must(t, os.WriteFile(filepath.Join(e.Vol, "new"), []byte("new"), 0o644))
		must(t, os.Rename(filepath.Join(e.Vol, "new"), filepath.Join(e.Vol, "c")))
		e.CheckReplay()
		for _, n := range []string{"a", "c"} {
			if got, _ := os.ReadFile(filepath.Join(e.Start, "deep", n+"2")); string(got) != "01234-WRITTEN-"+n {
				t.Fatalf("replica deep/%s2 = %q", n, got)
			}
		}
	})
}

// TestWriteAfterUnlinkIsDropped: writes to a file with no names left are
// invisible and must not resurrect it on the replica.
func TestWriteAfterUnlinkIsDropped(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			os.WriteFile(filepath.Join(vol, "a"), []byte("data"), 0o644)
		})
		f, err := os.OpenFile(filepath.Join(e.Vol, "a"), os.O_RDWR, 0)
		must(t, err)
		must(t, os.Remove(filepath.Join(e.Vol, "a")))
		e.Barrier()
		_, err = f.WriteAt([]byte("ghost"), 0)
		must(t, err)
		var st unix.Stat_t
		must(t, unix.Fstat(int(f.Fd()), &st))
		if st.Size != 5 && st.Size != 4 {
			t.Fatalf("fstat of the unlinked file: size %d", st.Size)
		}
		must(t, f.Close())
		e.CheckReplay()
	})
}

// TestAppendThroughHardLink: O_APPEND through one name after the file
// grew through the other. XDN recorded the kernel's stale end of file.
func TestAppendThroughHardLink(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			os.WriteFile(filepath.Join(vol, "a"), []byte("start\n"), 0o644)
			os.Link(filepath.Join(vol, "a"), filepath.Join(vol, "b"))
		})
		fa, err := os.OpenFile(filepath.Join(e.Vol, "a"), os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		fb, err := os.OpenFile(filepath.Join(e.Vol, "b"), os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		for i := 0; i < 20; i++ {
			_, err = fb.Write([]byte("via b, a longer line\n"))
			must(t, err)
			_, err = fa.Write([]byte("via a\n"))
			must(t, err)
		}
		fa.Close()
		fb.Close()
		e.CheckReplay()
	})
}

// TestOpenTruncIsRecorded: open(O_TRUNC) of an existing file.
func TestOpenTruncIsRecorded(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			os.WriteFile(filepath.Join(vol, "a"), bytes.Repeat([]byte("x"), 100000), 0o644)
		})
		f, err := os.OpenFile(filepath.Join(e.Vol, "a"), os.O_WRONLY|os.O_TRUNC, 0)
		must(t, err)
		must(t, f.Close())
		e.CheckReplay()
		if fi, _ := os.Stat(filepath.Join(e.Start, "a")); fi.Size() != 0 {
			t.Fatalf("replica size %d after O_TRUNC", fi.Size())
		}
	})
}

// TestOwnersSurviveWrites: the applier must not reset the owner of the
// files it writes (XDN's did).
func TestOwnersSurviveWrites(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			p := filepath.Join(vol, "owned")
			os.WriteFile(p, []byte("x"), 0o644)
			os.Chown(p, 1001, 1002)
		})
		must(t, os.WriteFile(filepath.Join(e.Vol, "owned"), []byte("rewritten"), 0o644))
		e.CheckReplay()
		var st unix.Stat_t
		must(t, unix.Stat(filepath.Join(e.Start, "owned"), &st))
		if st.Uid != 1001 || st.Gid != 1002 {
			t.Fatalf("replica owner %d:%d, want 1001:1002", st.Uid, st.Gid)
		}
	})
}

// TestODirect: O_DIRECT opens work and their writes are captured.
func TestODirect(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, nil)
		fd, err := unix.Open(filepath.Join(e.Vol, "direct"), unix.O_CREAT|unix.O_RDWR|unix.O_DIRECT, 0o644)
		must(t, err)
		buf := make([]byte, 8192)
		for i := range buf {
			buf[i] = byte(i)
		}
		_, err = unix.Pwrite(fd, buf, 4096)
		must(t, err)
		must(t, unix.Close(fd))
		e.CheckReplay()
	})
}

// TestSetgidDirectoryGroup: files created in a setgid directory take its
// group, on the primary and the replica alike.
func TestSetgidDirectoryGroup(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			d := filepath.Join(vol, "shared")
			os.Mkdir(d, 0o775)
			os.Chown(d, 0, 4242)
			unix.Chmod(d, 0o2775)
		})
		must(t, os.WriteFile(filepath.Join(e.Vol, "shared", "f"), []byte("x"), 0o644))
		must(t, os.Mkdir(filepath.Join(e.Vol, "shared", "sub"), 0o755))
		var st unix.Stat_t
		must(t, unix.Stat(filepath.Join(e.Vol, "shared", "f"), &st))
		if st.Gid != 4242 {
			t.Fatalf("file in setgid dir has gid %d", st.Gid)
		}
		e.CheckReplay()
	})
}

// TestWriteByOwnerClearsSetuid: an unprivileged write to a setuid file
// clears setuid on the primary (pbfs does it, having told the kernel it
// would) and the chmod reaches the replica.
func TestWriteByOwnerClearsSetuid(t *testing.T) {
	eachMount(t, mount.Config{AllowOther: true}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			os.Chmod(vol, 0o777)
			p := filepath.Join(vol, "prog")
			os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
			os.Chown(p, 1000, 1000)
			unix.Chmod(p, 0o6755)
		})
		// t.TempDir's directories are 0700; let uid 1000 through.
		openParents(t, e.Dir)
		// The kernel caches the setuid mode first; after the write, a statx
		// that asks for the mode alone must not be answered from that cache.
		var sx unix.Statx_t
		must(t, unix.Statx(unix.AT_FDCWD, filepath.Join(e.Vol, "prog"), 0, unix.STATX_MODE, &sx))
		cmd := exec.Command("/bin/sh", "-c", "printf 'echo hi\\n' >> prog")
		cmd.Dir = e.Vol
		asUser1000(cmd)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("write as uid 1000: %v\n%s", err, out)
		}
		must(t, unix.Statx(unix.AT_FDCWD, filepath.Join(e.Vol, "prog"), 0, unix.STATX_MODE, &sx))
		if sx.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			t.Fatalf("statx(STATX_MODE) right after an unprivileged write: mode %o, setuid/setgid still shown", sx.Mode&0o7777)
		}
		var st unix.Stat_t
		must(t, unix.Stat(filepath.Join(e.Vol, "prog"), &st))
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			t.Fatalf("mode %o after an unprivileged write: setuid/setgid kept", st.Mode&0o7777)
		}
		e.CheckReplay()
	})
}

// TestLargeUnalignedWritesReplay: capture applies a write of more than
// 64 KiB as several aligned backing writes. Unaligned, overlapping and
// O_APPEND writes of up to 1 MiB must still land whole and replay.
func TestLargeUnalignedWritesReplay(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, nil)
		p := filepath.Join(e.Vol, "big")
		r := rand.New(rand.NewPCG(3, 5))
		rnd := func(n int) []byte {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			return b
		}
		var want []byte
		put := func(off int, b []byte) {
			if len(want) < off+len(b) {
				want = append(want, make([]byte, off+len(b)-len(want))...)
			}
			copy(want[off:], b)
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
		must(t, err)
		for _, w := range []struct{ off, n int }{{12345, 1 << 20}, {65535, 300 << 10}, {0, 64<<10 + 1}, {1<<20 - 7, 200 << 10}} {
			b := rnd(w.n)
			if _, err := f.WriteAt(b, int64(w.off)); err != nil {
				t.Fatal(err)
			}
			put(w.off, b)
		}
		must(t, f.Close())
		a, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		b := rnd(700 << 10)
		if _, err := a.Write(b); err != nil {
			t.Fatal(err)
		}
		put(len(want), b)
		must(t, a.Close())
		got, err := os.ReadFile(p)
		must(t, err)
		if !bytes.Equal(got, want) {
			t.Fatalf("file content differs from what was written (%d bytes, want %d)", len(got), len(want))
		}
		e.CheckReplay()
	})
}

// TestKillPrivMatchesTheKernel: an unprivileged write, truncate,
// fallocate or O_TRUNC open, or any chown, of a setuid/setgid file clears the bits exactly as the
// kernel does on a local file system, which the test runs the same steps
// on first. A setgid file without group execute loses setgid only when
// the writer is not in its group (setattr_should_drop_sgid); pbfs kept it
// once, for every writer.
func TestKillPrivMatchesTheKernel(t *testing.T) {
	type step struct {
		name string
		mode uint32
		gid  int
		sh   string // run as uid 1000, gid 1000 (as root if name says root-), in the directory
	}
	steps := []step{
		{"w-sgid-noexec-othergroup", 0o6767, 0, "echo x >> w-sgid-noexec-othergroup"},
		{"w-sgid-noexec-owngroup", 0o2767, 1000, "echo x >> w-sgid-noexec-owngroup"},
		{"w-sgid-exec", 0o2777, 0, "echo x >> w-sgid-exec"},
		{"t-sgid-noexec-othergroup", 0o6767, 0, "truncate -s 1 t-sgid-noexec-othergroup"},
		{"t-sgid-noexec-owngroup", 0o6767, 1000, "truncate -s 1 t-sgid-noexec-owngroup"},
		{"o-sgid-noexec-othergroup", 0o2766, 0, ": > o-sgid-noexec-othergroup"},
		{"f-suid-sgid-exec", 0o6777, 1000, "fallocate -l 8192 f-suid-sgid-exec"},
		{"f-sgid-noexec-othergroup", 0o2766, 0, "fallocate -l 8192 f-sgid-noexec-othergroup"},
		{"root-c-suid-sgid-exec", 0o6755, 1000, "chown : root-c-suid-sgid-exec"}, // chown(f, -1, -1), as root
		{"root-c-sgid-noexec", 0o2744, 1000, "chown : root-c-sgid-noexec"},
	}
	run := func(t *testing.T, dir string) map[string]uint32 {
		for _, s := range steps {
			p := filepath.Join(dir, s.name)
			must(t, os.WriteFile(p, []byte("data"), 0o644))
			must(t, os.Chown(p, 0, s.gid))
			must(t, unix.Chmod(p, s.mode))
		}
		out := map[string]uint32{}
		for _, s := range steps {
			cmd := exec.Command("/bin/sh", "-c", s.sh)
			cmd.Dir = dir
			if !strings.HasPrefix(s.name, "root-") {
				asUser1000(cmd)
			}
			if o, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s as uid 1000: %v\n%s", s.sh, err, o)
			}
			var st unix.Stat_t
			must(t, unix.Stat(filepath.Join(dir, s.name), &st))
			out[s.name] = st.Mode & 0o7777
		}
		return out
	}
	plain := t.TempDir()
	must(t, os.Chmod(plain, 0o777))
	openParents(t, plain)
	want := run(t, plain)
	eachMount(t, mount.Config{AllowOther: true}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) { os.Chmod(vol, 0o777) })
		openParents(t, e.Dir)
		got := run(t, e.Vol)
		for _, s := range steps {
			if got[s.name] != want[s.name] {
				t.Errorf("%s: mode %o through pbfs, %o on a local file system", s.name, got[s.name], want[s.name])
			}
		}
		e.CheckReplay()
	})
}

// TestChownNoChangeUpdatesCtime: chown(f, -1, -1) changes nothing but
// the ctime, of a file, a directory and a symlink alike, as on ext4
// (pjdfstest chown/00.t); through pbfs the ctime stayed.
func TestChownNoChangeUpdatesCtime(t *testing.T) {
	e := fstest.Setup(t, mount.Config{}, nil)
	must(t, os.WriteFile(filepath.Join(e.Vol, "f"), []byte("x"), 0o644))
	must(t, os.Mkdir(filepath.Join(e.Vol, "d"), 0o755))
	must(t, os.Symlink("f", filepath.Join(e.Vol, "s")))
	for _, name := range []string{"f", "d", "s"} {
		p := filepath.Join(e.Vol, name)
		var before, after unix.Stat_t
		must(t, unix.Lstat(p, &before))
		time.Sleep(20 * time.Millisecond)
		must(t, unix.Fchownat(unix.AT_FDCWD, p, -1, -1, unix.AT_SYMLINK_NOFOLLOW))
		must(t, unix.Lstat(p, &after))
		if after.Ctim.Nano() <= before.Ctim.Nano() {
			t.Errorf("%s: ctime %d after chown(-1, -1), %d before", name, after.Ctim.Nano(), before.Ctim.Nano())
		}
	}
	e.CheckReplay()
}

// TestUnprivilegedWriteDropsCapabilities: a write by a caller without
// CAP_FSETID removes the file's capability, every time one was set again
// through the mount (pbfs remembers a file has none, so that later writes
// skip the removal), and the replica follows.
func TestUnprivilegedWriteDropsCapabilities(t *testing.T) {
	e := fstest.Setup(t, mount.Config{AllowOther: true}, func(vol string) { os.Chmod(vol, 0o777) })
	openParents(t, e.Dir)
	p := filepath.Join(e.Vol, "prog")
	must(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Chown(p, 1000, 1000))
	caps := []byte{1, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	for round := 0; round < 3; round++ {
		must(t, unix.Setxattr(p, "security.capability", caps, 0))
		for i := 0; i < 2; i++ {
			cmd := exec.Command("/bin/sh", "-c", "echo x >> prog")
			cmd.Dir = e.Vol
			asUser1000(cmd)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("write as uid 1000: %v\n%s", err, out)
			}
		}
		if _, err := unix.Lgetxattr(p, "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
			t.Fatalf("round %d: security.capability after an unprivileged write: %v, want ENODATA", round, err)
		}
	}
	e.CheckReplay()
}
