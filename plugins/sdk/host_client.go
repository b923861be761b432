package sdk

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/plugins/sdk/internal/pluginpb"
)

// hostClient is Host over the host's gRPC service, with barriers over
// the barrier line when the host gave one.
type hostClient struct {
	c    pluginpb.HostClient
	line *lineClient
}

func (h *hostClient) Barrier(ctx context.Context) (uint64, error) {
	if h.line != nil {
		return h.line.Barrier(ctx)
	}
	r, err := h.c.Barrier(ctx, &pluginpb.BarrierRequest{})
	if err != nil {
		return 0, hostError("barrier", ctx, err)
	}
	return r.Seq, nil
}

func (h *hostClient) Status(ctx context.Context) (Status, error) {
	r, err := h.c.Status(ctx, &pluginpb.StatusRequest{})
	if err != nil {
		return Status{}, hostError("status", ctx, err)
	}
	st := Status{Volume: r.Volume, VolumeID: r.VolumeId, Epoch: r.Epoch, LastSeq: r.LastSeq, Capture: r.Capture}
	for _, b := range r.Backups {
		st.Backups = append(st.Backups, Backup{Addr: b.Addr, Up: b.Up, AckedSeq: b.AckedSeq, AppliedSeq: b.AppliedSeq, Stale: b.Stale})
	}
	return st, nil
}

// hostError turns a gRPC failure back into something callers can branch
// on: the context's own error, ErrHostGone, or the host's message.
func hostError(op string, ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	s, _ := status.FromError(err)
	switch s.Code() {
	case codes.Unavailable, codes.Canceled:
		return fmt.Errorf("%s: %w: %s", op, ErrHostGone, s.Message())
	case codes.FailedPrecondition:
		return fmt.Errorf("%s: %w: %s", op, ErrBarrier, s.Message())
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", op, context.DeadlineExceeded)
	}
	return fmt.Errorf("%s: %s", op, s.Message())
}

func hintToPB(h PathHint) *pluginpb.PathHint {
	return &pluginpb.PathHint{LocalOnly: h.LocalOnly, Fsync: pluginpb.FsyncPolicy(h.Fsync), Reason: h.Reason}
}
