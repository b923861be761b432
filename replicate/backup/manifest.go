package backup

import (
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// Online verify (`pbfs verify`): a backup lists its volume, with a hash
// of every file, once it has applied the barrier the primary took for the
// comparison. It goes on applying meanwhile, as the primary goes on
// serving: a file written during the comparison can differ for a moment,
// and pbfs verify compares those again (cmd/pbfs/verify.go).

// manifestWait bounds how long a Manifest call waits for the backup to
// apply the barrier it asks for.
const manifestWait = 30 * time.Second

// Manifest lists the volume for the primary's verify.
func (b *Backup) Manifest(req *replpb.ManifestRequest, stream replpb.Replication_ManifestServer) error {
	deadline := time.NewTimer(manifestWait)
	defer deadline.Stop()
	for {
		progress := b.appliedChanged()
		if b.applied.Load() >= req.MinSeq {
			break
		}
		if b.stalled.Load() {
			return grpcstatus.Error(codes.FailedPrecondition, "this backup is stalled (it cannot apply what it holds): it needs a resync")
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-deadline.C:
			return grpcstatus.Errorf(codes.DeadlineExceeded, "this backup has applied seq %d, not yet %d", b.applied.Load(), req.MinSeq)
		case <-progress:
		case <-time.After(100 * time.Millisecond): // a stall sets no progress
		}
	}
	return manifest.Walk(stream.Context(), b.cfg.Volume, names(req.Paths), nil, func(e manifest.Entry) error {
		return stream.Send(&replpb.ManifestEntry{Path: []byte(e.Path), Mode: e.Mode, Uid: e.UID, Gid: e.GID, Size: e.Size,
			Digest: e.Digest, Target: []byte(e.Target), Missing: e.Missing, Xattrs: e.Xattrs})
	})
}

// names turns a request's paths into strings.
func names(b [][]byte) []string {
	if b == nil {
		return nil
	}
	out := make([]string, len(b))
	for i, p := range b {
		out[i] = string(p)
	}
	return out
}
