package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// firstSeq is the oldest batch the running mount's journal still holds.
func firstSeq(t *testing.T, jdir string) uint64 {
	t.Helper()
	out, code := run(t, "journal", "ls", "--json", "--journal", jdir)
	var rows []lsRow
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) == 0 {
		t.Fatalf("journal ls: exit %d:\n%s", code, out)
	}
	return rows[0].Seq
}

func writeBatches(t *testing.T, c *fstest.Cluster, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprint("r", i)), []byte("retained?"), 0o644))
		time.Sleep(80 * time.Millisecond) // sealed by the timer, one batch each
	}
}

// --retain and --retain-max do what the help says: --retain D trims
// batches every backup holds once they are D old; --retain 0 keeps
// everything; --retain-max D trims a batch D old even if a backup lacks it.
func TestRetentionFlags(t *testing.T) {
	waitTrimmed := func(jdir string) bool {
		for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if firstSeq(t, jdir) > 1 {
				return true
			}
		}
		return false
	}
	trims := fstest.NewCluster(t, 1, nil, "--retain", "1s")
	writeBatches(t, trims, 5)
	if !waitTrimmed(trims.Jdir) {
		t.Error("--retain 1s: nothing trimmed in 8 s")
	}

	keeps := fstest.NewCluster(t, 1, nil, "--retain", "0", "--retain-max", "0")
	writeBatches(t, keeps, 5)
	time.Sleep(2 * time.Second)
	if s := firstSeq(t, keeps.Jdir); s != 1 {
		t.Errorf("--retain 0: batch %d is the oldest left", s)
	}

	max := fstest.NewCluster(t, 1, nil, "--retain", "1h", "--retain-max", "1s", "--ack", "none")
	b := max.Backups[0]
	fstest.Freeze(t, b.Cmd.Process)
	writeBatches(t, max, 5)
	if !waitTrimmed(max.Jdir) {
		t.Error("--retain-max 1s: nothing trimmed in 8 s while a backup lacked the batches")
	}
}
