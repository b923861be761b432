// Package backup is the backup's side of replication: a Backup receives a
// primary's batches (raw stream or gRPC, behind the token and the epoch
// fence), stores them durably in its own journal, acks, and applies them
// in order to its copy of the volume, confined to it. It serves resyncs,
// manifests for verify and reports for elections, and Promote readies its
// journal and volume to serve as the primary.
//
// Batches travel in the journal's encoding, so what a backup verifies is
// byte for byte what it stores. Every batch carries the primary's epoch; a
// backup refuses an epoch lower than the highest it has seen (fencing).
package backup
