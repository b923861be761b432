package primary

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	grpcstatus "google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/internal/status"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// Online verify (`pbfs verify`) from the primary's side: the client of
// a backup's Manifest call (../backup/manifest.go), for the primary and for
// pbfs verify.

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
