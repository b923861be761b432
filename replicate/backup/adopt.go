package backup

import (
	"errors"
	"fmt"
	"io"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/journal"
)

// A resync makes the backup's volume an exact copy of the primary's, and
// so removes whatever the primary lacks. The first resync of a backup
// that has never served a volume would thus empty a directory given by
// mistake (a `pbfs backup` pointed at a directory of other files removed
// them all). Unless the backup was started with
// --adopt (Config.Adopt), that resync is refused while the volume
// holds anything but a file system's lost+found. --adopt is for a volume
// seeded with a copy of the primary's, which shortens the first resync to
// the blocks that differ.

// ErrForeignVolume refuses the first resync into a volume that holds files.
var ErrForeignVolume = errors.New("the volume holds files this backup never received, and the first resync would remove what the primary lacks")

// firstResyncKey names, in the backup's journal metadata, the volume whose
// first resync began: one that was cut short (a crash, a lost connection)
// left files of that volume behind, and resumes without --adopt.
var firstResyncKey = journal.KeyFirstResync.Name

// refuseForeignVolume fails if the volume holds entries and no first
// resync of volume began here; else it notes that one begins. The caller
// holds b.mu.
func (b *Backup) refuseForeignVolume(volume string) error {
	if v, err := b.store.Meta(firstResyncKey); err == nil && string(v) == volume {
		return nil
	}
	name, err := firstEntry(b.cfg.Volume)
	if err != nil {
		return status.Errorf(codes.Internal, "resync: read the volume: %v", err)
	}
	if name == "" {
		if err := b.store.SetMeta(firstResyncKey, []byte(volume)); err != nil {
			return status.Errorf(codes.Internal, "resync: %v", err)
		}
		return nil
	}
	b.m.rejected.WithLabelValues("foreign_volume").Inc()
	msg := fmt.Sprintf("backup volume %s holds files (%q among them) this backup never received: %v; start the backup with --adopt to make it a copy of the primary's volume, or give it an empty directory", b.cfg.Volume, name, ErrForeignVolume)
	b.log.Error("refused the first resync", "volume", b.cfg.Volume, "holds", name, "err", ErrForeignVolume)
	return status.Error(codes.FailedPrecondition, msg)
}

// firstEntry returns the name of an entry of dir other than lost+found,
// or "" if there is none.
func firstEntry(dir string) (string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for {
		names, err := f.Readdirnames(16)
		for _, n := range names {
			if n != "lost+found" {
				return n, nil
			}
		}
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
	}
}
