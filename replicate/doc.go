// Package replicate turns a journal into a replicated one. On the primary,
// a Shipper per backup streams sealed batches (many in flight, cumulative
// acks) and an AckSet answers "is seq durable on enough backups". The
// backup's side is package backup; how the two reach each other, package
// wire.
package replicate
