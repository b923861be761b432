package control

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/internal/ratelog"
	"github.com/pbfs/pbfs/journal"
)

// The control socket's endpoints, one handler each (Serve routes them).

// serveBarrier answers POST /v1/barrier: a barrier, its seq as JSON; with
// ?timeout=D it gives up a little before D and says why.
func serveBarrier(b Backend, log *slog.Logger, failed *ratelog.Limiter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if t, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && t > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, t)
			defer cancel()
		}
		seq, err := b.Barrier(ctx)
		if err != nil {
			if ok, held := failed.Allow("barrier", time.Now()); ok && held > 0 {
				log.Warn("barrier failed", "err", err, "failures_not_logged", held)
			} else if ok {
				log.Warn("barrier failed", "err", err)
			}
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, map[string]uint64{"seq": seq})
	}
}

// serveManifest answers POST /v1/manifest: the volume as the backups should
// have it, one JSON entry per line.
func serveManifest(b Backend) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req pathsRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
			http.Error(w, "manifest: "+err.Error(), http.StatusBadRequest)
			return
		}
		req.merge()
		// One JSON entry per line; a last line {"error": ...} if the walk failed.
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		if err := b.Manifest(r.Context(), req.Paths, func(e manifest.Entry) error { return enc.Encode(e) }); err != nil {
			enc.Encode(map[string]string{"error": err.Error()})
		}
	}
}

// serveCompare answers POST /v1/compare: paths on the primary and every
// backup as of one batch.
func serveCompare(b Backend, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req pathsRequest
		err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req)
		req.merge()
		if err != nil || len(req.Paths) == 0 || len(req.Paths) > MaxComparePaths {
			http.Error(w, fmt.Sprintf("compare: give 1 to %d paths to compare", MaxComparePaths), http.StatusBadRequest)
			return
		}
		out, err := b.Compare(r.Context(), req.Paths)
		if err != nil {
			log.Warn("compare failed", "err", err)
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, out)
	}
}

// serveResync answers POST /v1/resync: resync every backup, or the ones
// named, now.
func serveResync(b Backend) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req resyncRequest // an empty body (a client from before): every backup
		if r.ContentLength != 0 {
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, "resync: "+err.Error(), http.StatusBadRequest)
				return
			}
		}
		if err := b.Resync(req.Backups); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		writeJSON(w, map[string]string{"resync": "started"})
	}
}

// serveStatus answers GET /v1/status: the mount's Status.
func serveStatus(b Backend) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { writeJSON(w, b.Status()) }
}

// serveBatch answers GET /v1/batches/{seq}: one encoded batch.
func serveBatch(b Backend, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
		if err != nil {
			http.Error(w, "bad seq", http.StatusBadRequest)
			return
		}
		enc, err := b.Get(seq)
		if errors.Is(err, journal.ErrNotFound) {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		} else if err != nil {
			log.Error("control: read batch", "seq", seq, "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(enc)
	}
}

// serveBatches answers GET /v1/batches?from=N: the batches from N on, as
// frames.
func serveBatches(b Backend, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		from, err := strconv.ParseUint(r.URL.Query().Get("from"), 10, 64)
		if err != nil {
			http.Error(w, "bad from", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		// A stream of frames: seq (8 bytes), length (4 bytes), encoded
		// batch; a frame of seq 0 and length 0 ends a complete stream.
		err = b.Scan(from, func(seq uint64, enc []byte) error {
			var hdr [12]byte
			binary.BigEndian.PutUint64(hdr[:8], seq)
			binary.BigEndian.PutUint32(hdr[8:], uint32(len(enc)))
			if _, err := w.Write(hdr[:]); err != nil {
				return err
			}
			_, err := w.Write(enc)
			return err
		})
		if err != nil {
			log.Warn("control: batch scan ended early", "err", err)
			return // no end frame: the client reports a cut stream
		}
		w.Write(make([]byte, 12))
	}
}
