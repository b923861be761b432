// Package replicate turns a journal into a replicated one. Its packages
// split it by role: primary ships a journal's batches to the backups and
// answers barriers by their acks; backup receives, stores, acks and
// applies them; wire is how the two reach each other. This package holds
// only the tests that run both sides together.
package replicate
