// Package journal owns the state-diff journal: captured ops, their
// coalescing into a batch, the versioned binary batch format (zstd body,
// CRC-32C checksums, epoch and sequence number) and the store that keeps
// sealed batches: their bodies in a log of preallocated segment files
// (segment.go, seglog.go), the journal's metadata in Badger. It is the
// only package that imports Badger or zstd.
//
// docs/FORMAT.md describes every byte of a batch, of the batch log and
// every key of the store.
//
// # Basics
//
// A Store is one journal directory, opened by one process at a time:
//
//	st, err := journal.OpenStore(dir, journal.StoreOptions{Logger: log})
//	h, size, err := st.Append(ops, time.Now(), written, false) // the next seq
//	enc, err := st.Get(h.Seq)                                  // the encoded batch
//	b, err := journal.Decode(enc)                              // verified, decompressed
//	err = st.Scan(from, func(seq uint64, enc []byte) error { ... })
//	err = st.Close()
//
// Batches are numbered 1, 2, 3... without gaps; each names the checksum of
// the one before it (Header.Prev), so a store holds one chain, and
// AppendEncoded (a backup storing what its primary sent) refuses a batch
// that does not continue it (ErrChain). A sealed batch too large for one
// batch is split (Split) into batches carrying FlagMore but the last: only
// whole groups may be applied (WholeSeals). Metadata (Meta, SetMeta,
// SetMetaUint, SetMetaUints) lives beside the batches: the epoch, the
// open marker (MarkOpen, MarkClosed), the volume id, a backup's fence.
// Each value carries a checksum that every open checks (metaseal.go): a
// read-write open of damaged metadata fails with ErrDamaged naming the
// key, a read-only one reports it (MetaDamage). Trim drops old batches
// (retention.go); Reset replaces the whole chain with one anchor (a
// resync).
//
// # Durability
//
// Every write a Store makes is durable when it returns, with one
// exception: a store opened with LazyAppends (a primary's) appends without
// syncing, and Sync makes everything appended so far durable (metadata,
// markers, Reset and AppendEncoded are still synced before they return).
// A primary calls Sync when no backup holds a batch a barrier needs; a
// crash of the machine otherwise loses lazily appended batches, which is
// why an unclean open marker makes the next mount resync its backups from
// the volume.
//
// # Caveats
//
//   - The bytes Scan passes to fn are reused for the next batch and valid
//     only during the call: copy them to keep them. Get returns a copy.
//   - One process at a time: a second OpenStore of the same directory fails
//     with ErrLocked (the running mount's control socket serves its journal
//     to `pbfs journal` meanwhile).
//   - After a crash the logs may end in a torn write: a read-write open cuts
//     it off (what the next start does anyway). A read-only open reads the
//     batch log up to it, and fails with ErrNeedsRecovery when Badger's own
//     logs are torn or the batches are still in Badger, where journals made
//     before the batch log kept them (migrate.go moves them).
//   - Badger writes its value log through mmap, and a full disk is a SIGBUS,
//     not an error: appends keep StoreOptions.Reserve free on the file system
//     (DefaultReserve when zero) and fail with ErrJournalFull, which wraps
//     ENOSPC, before that (space.go). CheckReserve refuses, before anything
//     is created, a file system no larger than the reserve.
//   - An open checks the bodies of the batch log's newest segment only.
//     Get checks every record it reads from the disk (ErrCorrupt), and
//     CheckBatches, run in the background by a mount and a backup, reads
//     the older segments through; BatchCheck says what either found.
//   - Close gives up after a while (ErrCloseTimeout) rather than hang on a
//     disk that refuses Badger's last table flush.
//   - Failpoints (PBFS_FAILPOINT_APPEND) exist only in builds with
//     -tags failpoints, as the tests build pbfs.
package journal
