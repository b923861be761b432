// Package replicate turns a journal into a replicated one. On the primary,
// a Shipper per backup streams sealed batches over gRPC (many in flight,
// cumulative acks) and an AckSet answers "is seq durable on enough
// backups"; on a backup, Backup receives batches, stores them durably in its
// own journal, acks, and applies them in order to its copy of the volume.
//
// Batches travel in the journal's encoding, so what a backup verifies is
// byte for byte what it stores. Every batch carries the primary's epoch; a
// backup refuses an epoch lower than the highest it has seen (fencing).
package replicate
