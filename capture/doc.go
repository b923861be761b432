// Package capture is the core of the pbfs filesystem, free of any FUSE
// types: it keeps the node table (stable file ids that follow the inode
// through renames and hard links), applies every mutation to the backing
// directory, records it as a journal op inside the same critical section,
// and seals the recorded ops into batches that it hands to the journal.
//
// Locking, outermost first:
//
//   - FS.sealMu (RW): every mutation holds it shared; sealing a batch
//     holds it exclusively, so a batch boundary falls between whole ops.
//   - table.mu (RW), the namespace lock: changes to the tree (create,
//     unlink, rename, ...) hold it exclusively across the syscall and the
//     table update; lookups and path-addressed ops hold it shared.
//   - Node.mu, one per file: data and metadata ops on that file hold it
//     across the syscall and the record, so concurrent writers to
//     different files never wait for each other.
//   - table.mapMu guards the table's maps and links for short sections.
//
// Data and metadata ops are kept per file (journal.DataLog) and placed at
// the end of the batch under the file's path at sealing time; namespace
// ops keep their order. Replaying the batch therefore reproduces the tree
// at the seal (docs/ARCHITECTURE.md argues why).
package capture
