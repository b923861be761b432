package journal

import (
	"testing"
	"time"
)

// TestTrimKeepsTheSafeSeqAndTheNewest: the batch a backup holds last is
// what it proves its history with, so trimming stops below it.
func TestTrimKeepsTheSafeSeqAndTheNewest(t *testing.T) {
	st, err := OpenStore(t.TempDir(), StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	old := time.Now().Add(-time.Hour)
	for i := 0; i < 10; i++ {
		if _, _, err := st.Append([]Op{{Kind: KindMkdir, Path: "d", Mode: 0o755}}, old, 0); err != nil {
			t.Fatal(err)
		}
	}
	n, err := st.Trim(5, time.Now())
	if err != nil || n != 4 || st.First() != 5 {
		t.Fatalf("Trim(5): %d trimmed, first %d, %v", n, st.First(), err)
	}
	if n, _ := st.Trim(100, time.Now()); n != 5 || st.First() != 10 {
		t.Fatalf("Trim(100): %d trimmed, first %d; the newest must stay", n, st.First())
	}
	if _, err := st.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
}
