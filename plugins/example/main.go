// Command example is the smallest useful pbfs plugin, built only on the
// public SDK (plugins/sdk): as a frontend it takes a barrier every
// interval and logs how far the backups are; as a hint it marks paths
// from its config local-only or sets their fsync policy. docs/PLUGINS.md
// walks through it.
//
//	pbfs mount --plugin ex=bin/example --plugin-config ex:interval=1s,local=tmp/|*.pid ...
package main

import "github.com/pbfs/pbfs/plugins/sdk"

func main() { sdk.Serve(&Example{}) }
