package backup

import "net"

// ServeGRPCOnly serves ln as a backup from before the raw stream did: over
// gRPC alone.
func (b *Backup) ServeGRPCOnly(ln net.Listener) error { return b.serve(ln, false) }
