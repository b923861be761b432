// Package wire holds what both ends of the pbfs plugin protocol share: the
// go-plugin handshake, the protocol versions and the bridge that lets the
// SDK's test harness reach the SDK's unexported server side.
package wire

import (
	"log/slog"

	"github.com/hashicorp/go-plugin"
)

const (
	// ProtocolVersion is the plugin protocol's current major version.
	ProtocolVersion = 1
	// PluginName is the one entry in every plugin set.
	PluginName = "pbfs"
	// CookieKey and CookieValue make a plugin binary refuse to run unless
	// a pbfs host started it.
	CookieKey   = "PBFS_PLUGIN"
	CookieValue = "pbfs-plugin-7d1c2b4e"

	// KindFrontend and KindHint name the roles a plugin can serve.
	KindFrontend = "frontend"
	KindHint     = "hint"
)

// Handshake is the go-plugin handshake for a protocol version.
func Handshake(version int) plugin.HandshakeConfig {
	return plugin.HandshakeConfig{ProtocolVersion: uint(version), MagicCookieKey: CookieKey, MagicCookieValue: CookieValue}
}

// Accepted lists the protocol versions a host of version current accepts:
// its own and the one before, so plugins can upgrade after the host.
func Accepted(current int) []int {
	if current > 1 {
		return []int{current, current - 1}
	}
	return []int{current}
}

// ServerPlugin builds the plugin-side go-plugin Plugin for an SDK
// implementation. The sdk package sets it; sdktest uses it.
var ServerPlugin func(impl any, log *slog.Logger) (plugin.Plugin, error)
