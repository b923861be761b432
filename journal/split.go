package journal

// Limits of one batch as a writer cuts a seal into batches. They sit well
// inside what a decoder accepts (MaxBodySize, MaxOps) and what the Badger
// store takes as one value (its value-log file size, 256 MiB), so a sealed
// set of ops, however large, always encodes and stores: the capture layer
// has already applied those ops, and a batch that could not be journaled
// would wedge replication for good.
const (
	ChunkBytes = 64 << 20
	ChunkOps   = 1 << 20
)

// opBound is an upper bound on the encoded size of op: its strings and
// data plus room for the kind, the fid and every integer field.
func opBound(op *Op) int {
	return 96 + len(op.Path) + len(op.Path2) + len(op.Target) + len(op.Name) + len(op.Data)
}

// Split cuts ops into runs that each encode within ChunkBytes and ChunkOps
// (one run, ops itself, in the usual case). A single op never exceeds the
// limits: its data is at most 1 MiB, its strings at most a few KiB.
// Writers store the runs as consecutive batches, all but the last with
// FlagMore.
func Split(ops []Op) [][]Op {
	var out [][]Op
	start, size := 0, 0
	for i := range ops {
		n := opBound(&ops[i])
		if i > start && (size+n > ChunkBytes || i-start >= ChunkOps) {
			out = append(out, ops[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(out, ops[start:])
}

// WholeSeals splits batches (consecutive, in seq order) into those that
// end a seal, and the trailing ones of a group whose last batch is not
// among them: replaying the latter alone would leave a state the primary
// never had.
func WholeSeals(batches []*Batch) (whole, partial []*Batch) {
	n := len(batches)
	for n > 0 && batches[n-1].More {
		n--
	}
	return batches[:n], batches[n:]
}
