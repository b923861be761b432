// Package wire is how a primary and its backups reach each other: the raw
// stream's framing and opening (stream.go), the listener that tells a raw
// stream from gRPC on a backup's port (listen.go), mutual TLS (tls.go) and
// the shared token (auth.go), and the ack policy a primary's Hello
// announces (policy.go). It knows the protocol's messages (replpb) and
// nothing of what either side does with them.
package wire
