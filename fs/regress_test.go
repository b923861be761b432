package fs_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

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
