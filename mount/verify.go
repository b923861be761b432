package mount

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/primary"
)

// pbfs verify reads the primary's volume through these: Manifest while
// the service goes on, Compare with its mutations paused.

// compareWait bounds how long Compare pauses the service's mutations
// waiting for the backups.
const compareWait = 3 * time.Second

// Compare lists paths on the primary and on every backup exactly as of
// one batch (pbfs verify's second round, for paths the service changed
// while it compared): mutations pause, the open batch is sealed, the
// primary's copies are hashed, and each backup hashes its own once it has
// applied that batch, while no later one exists. The pause lasts as long
// as hashing the paths on both sides, at most compareWait for the backups.
func (m *Mount) Compare(ctx context.Context, paths []string) (control.Comparison, error) {
	if m.primary == nil {
		return control.Comparison{}, errors.New("compare: this mount does not replicate")
	}
	if err := m.srv.Flush(ctx); err != nil {
		return control.Comparison{}, fmt.Errorf("compare: %w", err)
	}
	out := control.Comparison{Primary: map[string]manifest.Entry{}}
	pause, err := m.committer.Frozen(ctx, func(h journal.Header) error {
		out.Seq = h.Seq
		if err := m.Manifest(ctx, paths, func(e manifest.Entry) error { out.Primary[e.Path] = e; return nil }); err != nil {
			return err
		}
		out.Backups = m.primary.Manifests(ctx, h.Seq, paths, compareWait)
		return nil
	})
	if err != nil {
		return control.Comparison{}, fmt.Errorf("compare: %w", err)
	}
	out.Paused = pause
	m.log.Info("compared paths as of one batch", "paths", len(paths), "seq", out.Seq, "paused", pause.Round(time.Microsecond))
	return out, nil
}

// Manifest lists the volume as the backups should hold it: the backing
// directory, read directly (never through the mount), local-only paths
// left out.
func (m *Mount) Manifest(ctx context.Context, paths []string, fn func(manifest.Entry) error) error {
	root := fmt.Sprintf("/proc/self/fd/%d", m.fs.RootFd())
	var keep []string
	for _, p := range paths {
		if !m.fs.Local(p) {
			keep = append(keep, p)
		}
	}
	if len(paths) > 0 && len(keep) == 0 {
		return nil
	}
	return manifest.Walk(ctx, root, keep, m.fs.Local, fn)
}

// BackupManifest fetches the manifest of the backup at addr, as of at
// least batch minSeq, with the mount's own token and TLS files (pbfs
// verify, through the control socket).
func (m *Mount) BackupManifest(ctx context.Context, addr string, minSeq uint64) (map[string]manifest.Entry, error) {
	if !slices.Contains(m.Backups(), addr) {
		return nil, fmt.Errorf("manifest of %s: not a backup of this primary", addr)
	}
	return primary.FetchManifest(ctx, addr, m.cfg.Token, m.cfg.TLS, minSeq, nil)
}
