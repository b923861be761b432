// Package primary is the primary's side of replication: a Shipper per
// backup streams sealed batches (many in flight, cumulative acks), and the
// Primary answers "is seq durable on enough backups" by its ack policy,
// adds and removes backups while it runs, drops a lagging one from the
// ack set where the policy allows, and resyncs a backup that fell behind
// its journal's history.
package primary
