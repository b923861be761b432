package replicate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/internal/status"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
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

// FetchManifest asks the backup at addr for its manifest once it has
// applied minSeq (paths: only those).
func FetchManifest(ctx context.Context, addr, token string, tlsFiles wire.TLSFiles, minSeq uint64, paths []string) (map[string]manifest.Entry, error) {
	conn, err := wire.DialGRPC(addr, token, tlsFiles)
	if err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", addr, err)
	}
	defer conn.Close()
	return fetchManifest(ctx, replpb.NewReplicationClient(conn), addr, minSeq, paths)
}

func fetchManifest(ctx context.Context, c replpb.ReplicationClient, addr string, minSeq uint64, paths []string) (map[string]manifest.Entry, error) {
	s, err := c.Manifest(ctx, &replpb.ManifestRequest{MinSeq: minSeq, Paths: replpb.Names(paths)})
	if err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", addr, err)
	}
	out := map[string]manifest.Entry{}
	for {
		e, err := s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("manifest of %s: %s", addr, grpcstatus.Convert(err).Message())
		}
		out[string(e.Path)] = manifest.Entry{Path: string(e.Path), Mode: e.Mode, UID: e.Uid, GID: e.Gid, Size: e.Size, Digest: e.Digest, SHA256: e.Sha256, Xattrs: e.Xattrs,
			Target: string(e.Target), Missing: e.Missing}
	}
}

// Manifests asks every backup whose stream is up for its manifest of paths
// once it has applied seq, in parallel. While the primary's mutations
// are paused after seq (capture.Committer.Frozen), no batch after seq
// exists, so each backup answers with its volume exactly as of seq: the
// comparison pbfs verify needs for paths the service keeps changing.
// A backup that does not answer within wait is reported as such.
func (p *Primary) Manifests(ctx context.Context, seq uint64, paths []string, wait time.Duration) []status.BackupManifest {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	shippers := p.list()
	out := make([]status.BackupManifest, len(shippers))
	var wg sync.WaitGroup
	for i, s := range shippers {
		out[i].Backup = s.addr
		if !s.up.Load() {
			out[i].Err = "its replication stream is down"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := fetchManifest(ctx, replpb.NewReplicationClient(s.conn), s.addr, seq, paths)
			if err != nil {
				out[i].Err = err.Error()
			}
			out[i].Entries = m
		}()
	}
	wg.Wait()
	return out
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
