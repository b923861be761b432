package control

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/pbfs/pbfs/internal/manifest"
)

// BackupManifests is what a primary's Backend offers pbfs verify: a
// backup's manifest, fetched with the primary's own token and TLS files,
// so that whoever may use the control socket need not hold them too.
type BackupManifests interface {
	BackupManifest(ctx context.Context, addr string, minSeq uint64) (map[string]manifest.Entry, error)
}

type backupManifestRequest struct {
	Addr   string `json:"addr"`
	MinSeq uint64 `json:"min_seq"`
}

// serveBackupManifest answers POST /v1/backups/manifest: one JSON entry
// per line, a last line {"error": ...} if the fetch failed.
func serveBackupManifest(b Backend, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		bm, ok := b.(BackupManifests)
		if !ok {
			http.Error(w, "this process is a backup: verify the primary", http.StatusConflict)
			return
		}
		var req backupManifestRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil || req.Addr == "" {
			http.Error(w, "backup manifest: give the backup's address", http.StatusBadRequest)
			return
		}
		m, err := bm.BackupManifest(r.Context(), req.Addr, req.MinSeq)
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		if err != nil {
			log.Warn("control: backup manifest failed", "backup", req.Addr, "err", err)
			enc.Encode(map[string]string{"error": err.Error()})
			return
		}
		for _, e := range m {
			if err := enc.Encode(e); err != nil {
				return
			}
		}
	}
}

// BackupManifest asks the primary for the manifest of its backup at addr,
// as of at least batch minSeq.
func (c *Client) BackupManifest(ctx context.Context, addr string, minSeq uint64) (map[string]manifest.Entry, error) {
	resp, err := c.post(ctx, "/v1/backups/manifest", backupManifestRequest{Addr: addr, MinSeq: minSeq})
	if err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	out, err := decodeManifest(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", addr, err)
	}
	return out, nil
}
