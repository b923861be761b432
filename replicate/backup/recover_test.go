package backup

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/journal"
)

// windowBatches are batches whose 2nd to 5th an apply window takes whole:
// data on files named once, a create, a rename to a fresh name.
func windowBatches() []*journal.Batch {
	w := func(p, s string, off uint64) journal.Op {
		return journal.Op{Kind: journal.KindWrite, Path: p, Offset: off, Data: []byte(s)}
	}
	return []*journal.Batch{
		{Ops: []journal.Op{{Kind: journal.KindCreate, Path: "a", Mode: 0o644}, {Kind: journal.KindCreate, Path: "c", Mode: 0o644}, w("a", "first", 0)}},
		{Ops: []journal.Op{{Kind: journal.KindCreate, Path: "b", Mode: 0o644}, w("a", "second", 5)}},
		{Ops: []journal.Op{{Kind: journal.KindMkdir, Path: "d", Mode: 0o755}, w("b", "bee", 0), w("a", "third", 11)}},
		{Ops: []journal.Op{{Kind: journal.KindRename, Path: "c", Path2: "d/c"}, w("d/c", "moved", 3)}},
		{Ops: []journal.Op{w("a", "fifth", 0), {Kind: journal.KindTruncate, Path: "a", Size: 12}}},
	}
}

// windowJournal writes batches into a backup journal at jdir, numbered
// from 1, and applies the first whole ones, and ops of the next, to vol.
func windowJournal(t *testing.T, jdir, vol string, batches []*journal.Batch, whole, ops int) {
	t.Helper()
	st, err := journal.OpenStore(jdir, journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var prev uint32
	for i, b := range batches {
		b.Seq, b.Epoch, b.Prev = uint64(i+1), 1, prev
		enc, h, err := journal.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendEncoded([][]byte{enc}); err != nil {
			t.Fatal(err)
		}
		prev = h.Checksum
	}
	st.SetMeta(journal.KeyRole.Name, []byte(journal.RoleBackup))
	st.Close()
	a, err := apply.New(vol, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := 0; i < whole; i++ {
		if err := a.ApplyUnsynced(batches[i]); err != nil {
			t.Fatal(err)
		}
	}
	if ops > 0 {
		part := &journal.Batch{Seq: batches[whole].Seq, Ops: batches[whole].Ops[:ops]}
		if err := a.ApplyUnsynced(part); err != nil {
			t.Fatal(err)
		}
	}
}

// windowRestart stages a backup stopped inside an apply window: the journal
// holds windowBatches, the volume the first whole of them and ops of the
// next, the progress file says batch 1 was synced, and the apply mark (of
// this boot, or of another when otherBoot) names op 1 of batch 4. It then
// opens the backup, waits until it applied everything, requires the volume
// a clean apply gives, and returns the backup.
func windowRestart(t *testing.T, whole, ops int, otherBoot bool) *Backup {
	t.Helper()
	dir := t.TempDir()
	vol, jdir, want := filepath.Join(dir, "vol"), filepath.Join(dir, "j"), filepath.Join(dir, "want")
	os.Mkdir(vol, 0o755)
	os.Mkdir(want, 0o755)
	batches := windowBatches()
	windowJournal(t, jdir, vol, batches, whole, ops)
	a, _ := apply.New(want, nil)
	for _, b := range batches {
		if err := a.ApplyUnsynced(b); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	p, _ := openProgress(jdir)
	p.save(1, 0)
	p.close()
	m, _ := openApplyMark(jdir)
	if otherBoot {
		copy(m.boot[:], "00000000-0000-0000-0000-000000000000")
	}
	m.write(4, 1, 0)
	m.close()
	b, err := Open(Config{Volume: vol, Journal: jdir, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.WaitApplied(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if got, w := volumeTree(t, vol), volumeTree(t, want); !reflect.DeepEqual(got, w) {
		t.Fatalf("volume after the restart:\n got %v\nwant %v", got, w)
	}
	return b
}

// TestWindowRedoneAfterReboot: a machine that lost power in the middle of
// an apply window left the volume holding any part of it, and an apply
// mark of an earlier boot. The restarted backup rebuilds the window from
// the last synced batch, redoes it, and ends with the volume a clean apply
// gives, without a resync; its progress file then says so.
func TestWindowRedoneAfterReboot(t *testing.T) {
	for _, cut := range []struct{ whole, ops int }{{1, 0}, {2, 1}, {3, 2}, {5, 0}} {
		t.Run(fmt.Sprintf("%d+%d", cut.whole, cut.ops), func(t *testing.T) {
			b := windowRestart(t, cut.whole, cut.ops, true)
			if applied, applying, ok := b.prog.load(); !ok || applied != 5 || applying != 0 {
				t.Fatalf("progress after the redo: applied %d applying %d (%v), want 5 0", applied, applying, ok)
			}
		})
	}
}

// TestWindowResumedInTheSameBoot: a backup killed inside a window, on a
// machine that kept running, resumes at the op its mark names (batch 4's
// rename done, its write not): the batches before it are whole in the page
// cache.
func TestWindowResumedInTheSameBoot(t *testing.T) {
	b := windowRestart(t, 3, 1, false)
	if b.synced.Load() < 4 {
		t.Fatalf("synced %d after resuming batch 4", b.synced.Load())
	}
}

// volumeTree maps each path under dir to its mode and contents.
func volumeTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fi.Mode().String()
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] += " " + string(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
