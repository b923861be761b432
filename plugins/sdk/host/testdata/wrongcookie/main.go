// Command wrongcookie is a go-plugin plugin of some other program: its
// handshake cookie is not pbfs's, so pbfs must refuse it.
package main

import "github.com/hashicorp/go-plugin"

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: plugin.HandshakeConfig{ProtocolVersion: 1, MagicCookieKey: "OTHER_PLUGIN", MagicCookieValue: "other"},
		Plugins:         plugin.PluginSet{},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}
