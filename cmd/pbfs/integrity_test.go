package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// Damage on the disk, as an outside tester made it: bytes flipped in a
// metadata value in Badger's files, and in a batch of an old segment.

// flipValue flips two bytes of value in the first of Badger's files in
// dir (its tables and logs; not the batch log) that holds the value, or 8
// bytes of it: Badger compresses its table blocks, and a run that also
// occurs in an earlier value is stored as a copy of it, so the value may
// not be there whole. Either way the value read back differs. It reports
// whether it found the value.
func flipValue(t *testing.T, dir string, value []byte) bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		must(t, err)
		for i := 0; i+8 <= len(value); i++ {
			if j := bytes.Index(b, value[i:i+8]); j >= 0 {
				b[j+2] ^= 0x3c
				b[j+3] ^= 0x3c
				must(t, os.WriteFile(p, b, 0o600))
				return true
			}
		}
	}
	return false
}

// TestDamagedMetadataRefused: two bytes flipped inside the volume id in a
// backup's Badger table. journal verify names the key and exits 1; the
// backup refuses to start, naming it and the remedy, and changes nothing;
// the remedy (a new journal, --adopt) brings it back. The same damage in
// the primary's journal makes pbfs mount refuse.
func TestDamagedMetadataRefused(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	must(t, os.WriteFile(filepath.Join(c.Vol, "f"), []byte("before the damage"), 0o644))
	c.RequireConverged()
	st, err := c.Primary.Client().Status(context.Background())
	must(t, err)
	id := st.VolumeID
	b := c.Backups[0]
	stopBackup(b)
	if !flipValue(t, b.Jdir, []byte(id)) {
		t.Fatalf("the volume id %s is in none of the backup journal's files", id)
	}
	for _, w := range []string{"metadata m/volume is damaged", "restore the journal directory from a copy"} {
		if out, code := run(t, "journal", "verify", "--journal", b.Jdir); code != 1 || !strings.Contains(out, w) {
			t.Fatalf("journal verify of the damaged backup journal: exit %d, want 1 saying %q:\n%s", code, w, out)
		}
	}
	before := fstest.Snapshot(t, b.Vol)
	out, code := run(t, "backup", "--listen", fstest.FreeAddr(t), "--journal", b.Jdir, "--token", fstest.TestToken, b.Vol)
	if code != 1 || !strings.Contains(out, "metadata m/volume is damaged") || !strings.Contains(out, "--adopt") {
		t.Fatalf("pbfs backup on the damaged journal: exit %d, want 1 naming m/volume and the remedy:\n%s", code, out)
	}
	fstest.RequireEqual(t, before, fstest.Snapshot(t, b.Vol), "the refused backup's volume")

	// The remedy: the journal moved aside, the backup started with --adopt.
	must(t, os.Rename(b.Jdir, b.Jdir+".damaged"))
	b.Args = []string{"--adopt"}
	c.StartBackup(b)
	must(t, os.WriteFile(filepath.Join(c.Vol, "g"), []byte("after the damage"), 0o644))
	c.RequireConverged()

	c.Primary.Stop()
	stopBackup(b)
	if !flipValue(t, c.Jdir, []byte(id)) {
		t.Fatalf("the volume id %s is in none of the primary journal's files", id)
	}
	if out, code := run(t, "journal", "verify", "--journal", c.Jdir); code != 1 || !strings.Contains(out, "metadata m/volume is damaged") {
		t.Fatalf("journal verify of the damaged primary journal: exit %d, want 1:\n%s", code, out)
	}
	before = fstest.Snapshot(t, c.Vol)
	out, code = run(t, "mount", "--journal", c.Jdir, c.Vol)
	if code != 1 || !strings.Contains(out, "metadata m/volume is damaged") || fstest.Mounted(c.Vol) {
		t.Fatalf("pbfs mount on the damaged journal: exit %d, want 1 naming m/volume:\n%s", code, out)
	}
	fstest.RequireEqual(t, before, fstest.Snapshot(t, c.Vol), "the refused primary's volume")
}

// TestFormat1JournalsOpen: a primary's and a backup's journals written by
// the pbfs before metadata checksums (testdata) are read by journal verify
// as they are, then opened, sealed and served by mount and backup, which
// keep their volume id and replicate.
func TestFormat1JournalsOpen(t *testing.T) {
	fstest.RequireFUSE(t)
	const id = "d1ad46689cc1d96ad06f412970237c30" // the fixture's volume id
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xzpf", "testdata/format1-journals.tar.gz", "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	vol, jp, bvol, jb := filepath.Join(dir, "vol"), filepath.Join(dir, "jp"), filepath.Join(dir, "bvol"), filepath.Join(dir, "jb")
	for _, j := range []string{jp, jb} {
		if out, code := run(t, "journal", "verify", "--journal", j); code != 0 || !strings.Contains(out, "carry no checksums") {
			t.Fatalf("journal verify of a format 1 journal: exit %d:\n%s", code, out)
		}
	}
	addr := fstest.FreeAddr(t)
	bk := exec.Command(pbfsBin, "backup", "--listen", addr, "--journal", jb, "--token", fstest.TestToken, bvol)
	bout := &fstest.Buffer{}
	bk.Stdout, bk.Stderr = bout, bout
	must(t, bk.Start())
	defer func() {
		bk.Process.Signal(syscall.SIGINT)
		bk.Wait()
	}()
	t.Setenv("PBFS_TOKEN", fstest.TestToken)
	p := fstest.StartMount(t, nil, vol, jp, "--backup", addr, "--ack", "all")
	must(t, os.WriteFile(filepath.Join(vol, "new.txt"), []byte("written after the migration"), 0o644))
	p.Barrier()
	st, err := p.Client().Status(context.Background())
	must(t, err)
	if st.VolumeID != id || len(st.Backups) != 1 || !st.Backups[0].Up {
		t.Fatalf("after the migration: volume id %s, backups %+v; want %s and the backup up\nprimary:\n%s\nbackup:\n%s", st.VolumeID, st.Backups, id, p.Out, bout)
	}
	waitLogged(t, p.Out, "metadata values now carry checksums", 1, "the primary did not say it sealed its metadata")
	waitLogged(t, bout, "metadata values now carry checksums", 1, "the backup did not say it sealed its metadata")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(bvol, "new.txt")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backup never applied the new file:\n%s", bout)
		}
	}
	p.Stop()
	bk.Process.Signal(syscall.SIGINT)
	bk.Wait()
	fstest.RequireEqual(t, fstest.Snapshot(t, vol), fstest.Snapshot(t, bvol), "backup vs primary after the migration")
	if strings.Contains(bout.String(), "serves volume") {
		t.Fatalf("the backup refused its primary:\n%s", bout)
	}
	for _, j := range []string{jp, jb} {
		if out, code := run(t, "journal", "verify", "--journal", j); code != 0 || strings.Contains(out, "carry no checksums") {
			t.Fatalf("journal verify after the migration: exit %d:\n%s", code, out)
		}
	}
}

// recordSeqs returns the seq of each record in the batch log's segment
// path, and where each body starts and ends (docs/FORMAT.md §6.1).
func recordSeqs(t *testing.T, path string) map[uint64][2]int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	out := map[uint64][2]int64{}
	for off := 0; off+24 <= len(b) && string(b[off:off+4]) == "PBR1"; {
		n := int(binary.LittleEndian.Uint32(b[off+4:]))
		out[binary.LittleEndian.Uint64(b[off+8:])] = [2]int64{int64(off + 24), int64(off + 24 + n)}
		off += 24 + n
	}
	return out
}

// TestDamagedOldSegment: 16 bytes flipped in a batch of an old segment of
// the primary's journal, a batch its backup, stopped, still needs. verify
// names the batch; the mount starts, and its check after the start logs
// the batch and its segment, counts it and shows it in pbfs status; the
// shipper never sends the batch, and resyncs the backup from the volume.
func TestDamagedOldSegment(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	b := c.Backups[0]
	// The primary's journal on a file system of its own, small enough
	// for segments of 4 MiB (a 32nd of it), in batches of at most 1 MiB.
	c.Primary.Stop()
	stopBackup(b)
	c.Jdir = filepath.Join(fstest.SmallFS(t, 128<<20), "j")
	b.Jdir = filepath.Join(t.TempDir(), "jb")
	c.StartBackup(b)
	args := []string{"--backup", b.Addr, "--ack", "all", "--batch-bytes", "1048576"}
	c.Primary = fstest.StartMount(t, nil, c.Vol, c.Jdir, args...)
	must(t, os.WriteFile(filepath.Join(c.Vol, "first"), []byte("held by the backup"), 0o644))
	c.RequireConverged()
	held := c.Barrier()
	stopBackup(b)

	// What the backup misses: batches over three or more segments.
	rng := rand.New(rand.NewPCG(36, 6))
	for i := 0; i < 24; i++ {
		data := make([]byte, 512<<10)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("f%02d", i)), data, 0o644))
	}
	c.Primary.Stop()
	segs, _ := filepath.Glob(filepath.Join(c.Jdir, "batches", "*.seg"))
	if len(segs) < 3 {
		t.Fatalf("segments %v: want three or more", segs)
	}
	damaged := held + 1
	var seg string
	var at [2]int64
	for _, s := range segs[:len(segs)-1] {
		if r, ok := recordSeqs(t, s)[damaged]; ok {
			seg, at = s, r
		}
	}
	if seg == "" {
		t.Fatalf("batch %d is in no segment but the newest", damaged)
	}
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	must(t, err)
	flip := make([]byte, 16)
	f.ReadAt(flip, (at[0]+at[1])/2)
	for i := range flip {
		flip[i] ^= 0xff
	}
	_, err = f.WriteAt(flip, (at[0]+at[1])/2)
	must(t, err)
	must(t, f.Close())
	if out, code := run(t, "journal", "verify", "--journal", c.Jdir); code != 1 || !strings.Contains(out, fmt.Sprintf("batch %d", damaged)) {
		t.Fatalf("journal verify: exit %d, want 1 naming batch %d:\n%s", code, damaged, out)
	}

	c.Primary = fstest.StartMount(t, nil, c.Vol, c.Jdir, args...)
	c.Primary.SkipChecks(t, "a batch of the journal damaged on purpose")
	line := fmt.Sprintf("first=%d last=%d segment=%s", damaged, damaged, seg)
	waitLogged(t, c.Primary.Out, line, 1, "the mount's check did not log the damaged batch and its segment")
	if n := fstest.MetricSum(controlMetrics(t, c.Jdir), "pbfs_journal_damaged_batches", ""); n != 1 {
		t.Fatalf("pbfs_journal_damaged_batches %v, want 1", n)
	}
	want := fmt.Sprintf("1 damaged on disk: batch %d in segment %s", damaged, filepath.Base(seg))
	if out, code := run(t, "status", "--journal", c.Jdir); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("pbfs status does not say %q: exit %d:\n%s", want, code, out)
	}

	// The backup needs the damaged batch: it is resynced instead.
	c.StartBackup(b)
	c.RequireConverged()
	waitLogged(t, c.Primary.Out, "a batch this backup needs is damaged in the journal", 1, "the shipper did not say why it resynced")
	if strings.Contains(b.Out.String(), "refused") {
		t.Fatalf("the backup was sent a damaged batch:\n%s", b.Out)
	}
	c.Primary.Stop()
	stopBackup(b)
	if out, code := run(t, "journal", "verify", "--journal", b.Jdir); code != 0 {
		t.Fatalf("the backup's journal: exit %d:\n%s", code, out)
	}
}
