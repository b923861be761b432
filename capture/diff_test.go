package capture

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/pbfs/pbfs/journal"
)

// TestRecordDiff: replaying the recorded runs over the old bytes gives the
// new bytes, for clustered, scattered and extending writes.
func TestRecordDiff(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 3000; i++ {
		old := make([]byte, r.IntN(5000))
		for j := range old {
			old[j] = byte(r.Uint32())
		}
		data := bytes.Clone(old[:r.IntN(len(old)+1)])
		data = append(data, make([]byte, r.IntN(100))...)
		for k := r.IntN(60); k > 0; k-- {
			if len(data) > 0 {
				data[r.IntN(len(data))]++
			}
		}
		var log journal.DataLog
		recordDiff(&log, 100, data, old)
		got := append(make([]byte, 100), old...)
		for _, op := range log.Ops(1, "f") {
			end := int(op.Offset) + len(op.Data)
			if end > len(got) {
				got = append(got, make([]byte, end-len(got))...)
			}
			copy(got[op.Offset:], op.Data)
		}
		want := append(make([]byte, 100), old...)
		if 100+len(data) > len(want) {
			want = append(want, make([]byte, 100+len(data)-len(want))...)
		}
		copy(want[100:], data)
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: replayed diff differs", i)
		}
		if ops := log.Ops(1, "f"); len(ops) > maxDiffRuns {
			t.Fatalf("case %d: %d runs", i, len(ops))
		}
	}
}
