// Command future speaks pbfs's handshake with a protocol version from the
// future (99), which this host must refuse with a clear message.
package main

import (
	"github.com/hashicorp/go-plugin"

	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: wire.Handshake(99),
		Plugins:         plugin.PluginSet{},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}
