package mount

import (
	"context"

	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/host"
)

// startPlugins launches the configured plugins once the mount serves; a
// plugin's crash or refusal never affects the mount (the supervisor
// restarts it with backoff).
func (m *Mount) startPlugins() {
	if len(m.cfg.Plugins) == 0 {
		return
	}
	m.plugins = host.Start(host.SupervisorConfig{
		Specs:    m.cfg.Plugins,
		Volume:   m.cfg.Mountpoint,
		Host:     pluginHost{m},
		Options:  host.Options{Logger: m.log, LogLevel: m.cfg.PluginLogLevel},
		Registry: m.reg,
	})
}

// stopPlugins stops them; frontends first finish the responses they hold,
// which needs barriers, so this runs before the unmount.
func (m *Mount) stopPlugins() {
	if m.plugins != nil {
		m.plugins.Close()
	}
}

// pluginHost is the mount as plugins see it.
type pluginHost struct{ m *Mount }

func (h pluginHost) Barrier(ctx context.Context) (uint64, error) { return h.m.Barrier(ctx) }

func (h pluginHost) Status(context.Context) (sdk.Status, error) {
	st := h.m.Summary()
	out := sdk.Status{Volume: st.Volume, VolumeID: st.VolumeID, Epoch: st.Epoch, LastSeq: st.LastSeq, Capture: st.Capture}
	for _, b := range st.Backups {
		out.Backups = append(out.Backups, sdk.Backup{Addr: b.Addr, Up: b.Up, AckedSeq: b.AckedSeq, AppliedSeq: b.AppliedSeq, Stale: b.Stale})
	}
	return out, nil
}
