// Package journal owns the state-diff journal: captured ops, their
// coalescing into a batch, the versioned binary batch format (zstd body,
// CRC-32C checksums, epoch and sequence number) and the Badger store that
// keeps sealed batches. It is the only package that imports Badger or zstd.
//
// docs/FORMAT.md describes every byte of a batch and every key of the store.
package journal
