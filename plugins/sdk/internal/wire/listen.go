package wire

// A host may hand a frontend plugin the listening socket of its client
// address (pbfs node keeps one socket for the node's life, so that clients
// are never refused while the role changes): the socket is the plugin's
// descriptor named by EnvListenFD, bound to the address EnvListenAddr
// names.
const (
	EnvListenFD   = "PBFS_PLUGIN_LISTEN_FD"
	EnvListenAddr = "PBFS_PLUGIN_LISTEN_ADDR"
)
