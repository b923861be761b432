package mount

import (
	"fmt"

	"github.com/pbfs/pbfs/internal/health"
	"github.com/pbfs/pbfs/internal/status"
)

// Health reports whether the mount serves as a primary (/readyz): its FUSE
// mount is up, its journal takes batches, a barrier can return (enough
// backups are up) and its plugins run. It reads only memory.
func (m *Mount) Health() health.Report {
	r := health.Report{Role: health.RolePrimary, Epoch: m.store.Epoch(), LastSeq: m.store.Last().Seq}
	select {
	case <-m.Done():
		r.Problems = append(r.Problems, "the FUSE mount is gone (unmounted): this process is stopping")
	default:
	}
	if m.committer.Holding() || m.store.Refusing() {
		r.Problems = append(r.Problems, "the journal refuses appends for want of space: writes wait or fail; free space on the journal's file system (pbfs status shows it)")
	}
	if m.primary != nil {
		r.Problems = append(r.Problems, m.primary.Problems()...)
		r.Lag = map[string]uint64{}
		for _, b := range m.primary.Status() {
			r.Lag[b.Addr] = b.LagBatches
		}
	}
	if m.plugins != nil {
		for _, p := range m.plugins.Status() {
			if p.State != status.PluginRunning {
				r.Problems = append(r.Problems, fmt.Sprintf("plugin %s is %s (%s): it restarts by itself; its log says why", p.Name, p.State, p.LastError))
			}
		}
	}
	return r.Judge()
}
