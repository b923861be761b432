package backup

import (
	"errors"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/journal"
)

// A batch that fails to apply for want of a resource (the volume's disk
// or quota full, no descriptors or memory left) is not a diverged volume:
// the backup keeps the batch, says so, and tries it again where it
// stopped once the resource may be back, rather than stalling until a
// resync that, with the primary gone, nobody could run. Batches keep
// arriving, going into the journal and being acked meanwhile; only the
// volume lags.

// Retry backoff bounds for a batch that failed for want of a resource.
var (
	applyRetryFirst = 500 * time.Millisecond
	applyRetryMax   = 10 * time.Second
)

// transientApply reports whether an apply error is a resource running
// out, which may pass, rather than a volume that no longer matches.
func transientApply(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retryApply tries batch seq again after err, a transient failure, until
// it applies (nil), fails for another reason (that error), the backup
// closes (errClosing) or a resync takes over (errSuperseded). Each try
// resumes the batch at the op that failed: the ops before it are done,
// the apply mark names it, and apply.Resume tells whether it took effect.
func (b *Backup) retryApply(seq uint64, err error) error {
	defer b.setBlocked(seq, nil)
	start, r := time.Now(), retrier{wait: applyRetryFirst}
	for tries := 1; ; tries++ {
		bl := b.setBlocked(seq, err)
		if !b.pause(&r, "applying a batch failed for want of a resource; the volume lags until it goes in, retrying",
			"seq", seq, "state", bl.String(), "tries", tries) {
			return errClosing
		}
		if b.stalled.Load() || b.applied.Load()+1 != seq {
			return errSuperseded // a resync took the volume over
		}
		run := b.applier.Apply
		if mseq, index, ino, ok := b.mark.read(); ok && mseq == seq {
			run = func(batch *journal.Batch) error { return b.applier.Resume(batch, index, ino) }
		}
		if err = b.applyOne(seq, run); err == nil {
			b.log.Info("batch applied after retries", "seq", seq, "tries", tries, "for", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if !transientApply(err) {
			return err
		}
	}
}

// syncVolume syncs the volume's file system for a window, trying again,
// as retryApply does, while a resource the sync needs is out (it opens
// the volume: no descriptor left is EMFILE). The window's batches wait in
// the page cache meanwhile, and a restart redoes them from "applied"
// (recoverWindow), so a sync that fails for want of a descriptor is no
// reason to stall the volume until a resync. It gives up, with the last
// error, when the backup closes.
func (b *Backup) syncVolume() error {
	err := b.applier.Sync()
	r := retrier{wait: applyRetryFirst}
	if err != nil && transientApply(err) {
		defer b.setBlocked(0, nil)
	}
	for tries := 1; err != nil && transientApply(err); tries++ {
		bl := b.setBlocked(b.applied.Load(), err)
		if !b.pause(&r, "syncing the volume failed for want of a resource; retrying", "state", bl.String(), "tries", tries) {
			return err
		}
		if err = b.applier.Sync(); err == nil {
			b.log.Info("the volume synced after retries", "tries", tries)
		}
	}
	return err
}

// retrier paces the tries of something that failed for want of a
// resource.
type retrier struct {
	wait   time.Duration // before the next try
	logged time.Time     // when a failure was last logged
}

// pause counts a retry, logs msg with args at most every 10 s and waits
// before the next try, longer each time; false if the backup closed
// meanwhile.
func (b *Backup) pause(r *retrier, msg string, args ...any) bool {
	b.m.applyRetries.Inc()
	if time.Since(r.logged) >= 10*time.Second {
		b.log.Error(msg, args...)
		r.logged = time.Now()
	}
	select {
	case <-b.done:
		return false
	case <-time.After(r.wait):
	}
	r.wait = min(2*r.wait, applyRetryMax)
	return true
}

// Ends of a retry other than the batch applying or failing: the backup is
// closing (the batch stays torn, for the next run to finish), or a resync
// took the volume over.
var (
	errClosing    = errors.New("backup closing")
	errSuperseded = errors.New("a resync took the volume over")
)
