package journal

import (
	"fmt"
	"os"
)

// Export copies the batches of src with seq >= from, verbatim, into a new
// journal at dir, so that what is about to be discarded (a deposed
// primary's unacknowledged suffix, say) stays readable by `pbfs journal
// ls`, `show` and `replay`. It returns how many batches it copied; none
// makes no directory.
func Export(dir string, src *Store, from uint64) (int, error) {
	var encs [][]byte
	var seqs []uint64
	err := src.Scan(from, func(seq uint64, enc []byte) error {
		encs = append(encs, append([]byte(nil), enc...))
		seqs = append(seqs, seq)
		return nil
	})
	if err != nil || len(encs) == 0 {
		return 0, err
	}
	if _, err := os.Stat(dir); err == nil {
		return 0, fmt.Errorf("export to %s: it exists", dir)
	}
	dst, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		return 0, fmt.Errorf("export: %w", err)
	}
	for i, enc := range encs {
		if err := dst.Put(seqs[i], enc); err != nil {
			dst.Close()
			return 0, fmt.Errorf("export batch %d: %w", seqs[i], err)
		}
	}
	if err := dst.Close(); err != nil {
		return 0, fmt.Errorf("export: %w", err)
	}
	return len(encs), nil
}
