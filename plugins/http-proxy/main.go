// Command http-proxy is the pbfs HTTP frontend plugin: it stands in front
// of the service, forwards requests over a bounded pool of keep-alive
// connections, and releases each response only after a barrier that
// started after the response was produced has returned (output commit).
// See docs/PLUGINS.md for its configuration.
package main

import (
	"github.com/pbfs/pbfs/plugins/http-proxy/proxy"
	"github.com/pbfs/pbfs/plugins/sdk"
)

func main() { sdk.Serve(proxy.New()) }
