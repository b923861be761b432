package backup

// A primary's Hello: admitted as the session served, or refused.

import (
	"context"
	"errors"
	"fmt"

	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// admit checks a primary's Hello: volume and epoch (word is the
// coordinator's on it, epoch.go). A new primary session replaces the one
// being served (the same primary reconnecting, or a new one with a higher
// epoch). The Welcome is what the backup holds as the session begins,
// read under the same lock: a Fence cannot come between.
func (b *Backup) admit(parent context.Context, stream backupStream, hello *replpb.Hello, word issuedWord) (context.Context, *replpb.Welcome, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if hello.VolumeId == "" {
		return nil, nil, b.refuse(stream, "protocol", reject(replpb.Reject_UNKNOWN, 0, "Hello without a volume id"))
	}
	if b.volumeID == "" {
		if err := b.store.SetMeta(journal.KeyVolume.Name, []byte(hello.VolumeId)); err != nil {
			return nil, nil, err
		}
		b.volumeID = hello.VolumeId
		b.log.Info("serving a new volume", "volume_id", hello.VolumeId)
	} else if b.volumeID != hello.VolumeId {
		return nil, nil, b.refuse(stream, "wrong_volume", reject(replpb.Reject_WRONG_VOLUME, 0,
			"this backup serves volume %s, not %s", b.volumeID, hello.VolumeId))
	}
	if label, why := b.epochRefusal(hello.Epoch, word); label != "" {
		return nil, nil, b.refuseEpoch(stream, label, why)
	}
	if b.fencingOut(hello.Epoch) {
		return nil, nil, b.refuse(stream, "fenced", b.refuseFenced(hello.Epoch))
	}
	if e := b.store.Epoch(); hello.Epoch < e {
		return nil, nil, b.refuse(stream, "stale_epoch", reject(replpb.Reject_STALE_EPOCH, e,
			"epoch %d is below %d: this primary was deposed", hello.Epoch, e))
	} else if hello.Epoch > e {
		if err := b.store.SetEpoch(hello.Epoch); err != nil {
			return nil, nil, err
		}
	}
	if err := b.notePolicy(hello); err != nil {
		return nil, nil, err
	}
	if b.active != nil {
		b.active.cancel()
	}
	b.newSessionReceived()
	ctx, cancel := context.WithCancel(parent)
	b.active = &session{epoch: hello.Epoch, cancel: cancel}
	b.log.Info("primary connected", "epoch", hello.Epoch, "primary_last_seq", hello.LastSeq, "durable_seq", b.store.Last().Seq)
	b.cfg.Events.Emit(events.KindPrimaryUp, "epoch", hello.Epoch, "primary_last_seq", hello.LastSeq, "durable_seq", b.store.Last().Seq)
	return ctx, b.welcome(), nil
}

func (b *Backup) refuse(stream backupStream, label string, msg *replpb.BackupMsg) error {
	b.m.rejected.WithLabelValues(label).Inc()
	b.flood("primary "+label, "refused a primary", "reason", msg.GetReject().GetReason())
	stream.Send(msg)
	return errors.New(msg.GetReject().GetReason())
}

func reject(code replpb.Reject_Code, epoch uint64, format string, a ...any) *replpb.BackupMsg {
	return &replpb.BackupMsg{Msg: &replpb.BackupMsg_Reject{Reject: &replpb.Reject{Code: code, Reason: fmt.Sprintf(format, a...), Epoch: epoch}}}
}
