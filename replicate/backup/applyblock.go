package backup

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/human"
)

// A backup that cannot apply a batch says so: in its own status, in every
// ack (so the primary's status shows it per backup), in a metric and in
// its log, naming the batch, the op, its path and the errno, and whether
// more room would help. It used to retry in silence: the primary showed
// APPLIED behind DURABLE and nothing else, and a promotion waited for the
// apply for good.
//
// Transient or not: every failure retryApply takes (ENOSPC, EDQUOT,
// EMFILE, ENFILE, ENOMEM) is retried with backoff, because the cure is
// outside pbfs and may come at any moment (space freed, a quota raised,
// the file system grown or given the feature it lacks), and nothing else
// can apply the batch meanwhile: a resync would meet the same op. What
// the backup tells apart is the cause, for the operator: an ENOSPC while
// the volume's file system has room to spare (roomSlack) and free inodes is
// the file system refusing the op itself (ext4 refuses an extended
// attribute larger than a block, without ea_inode, with ENOSPC), which
// no amount of waiting cures; an ENOSPC on a full file system is waiting
// for room.

// applyBlock is a batch the backup cannot apply and keeps retrying.
type applyBlock struct {
	Seq     uint64
	Op      string // the op, as the journal prints it ("" for the volume's sync)
	Index   int
	Path    string
	Errno   string // "ENOSPC"
	Err     string
	Refused bool  // ENOSPC with room to spare: the file system refuses the op
	Free    int64 // bytes free on the volume's file system at the last try
	Since   time.Time
	Tries   int
}

// roomSlack is the room beyond an op's own bytes, and beyond a fiftieth
// of the file system, below which an ENOSPC is taken for a full file
// system: ext4 keeps back up to 2 % (at most 16 MiB) for its own
// metadata, which even root cannot write data into.
const roomSlack = 16 << 20

// blockOf describes the failure err of batch seq on the volume at vol.
func blockOf(seq uint64, err error, vol string) *applyBlock {
	bl := &applyBlock{Seq: seq, Err: err.Error(), Errno: "error", Since: time.Now()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		bl.Errno = unix.ErrnoName(errno)
	}
	need := 0
	if oe, ok := errors.AsType[*apply.OpError](err); ok {
		bl.Op, bl.Index, bl.Path, need = strings.Join(strings.Fields(oe.Op), " "), oe.Index, oe.Path, oe.Bytes
		bl.Err = oe.Err.Error()
	}
	var st unix.Statfs_t
	if unix.Statfs(vol, &st) == nil {
		bl.Free = int64(st.Bfree) * st.Bsize // the backup runs as root
		spare := bl.Free - int64(need) - int64(st.Blocks)*st.Bsize/50
		bl.Refused = errno == unix.ENOSPC && spare >= roomSlack && (st.Files == 0 || st.Ffree > 0)
	}
	return bl
}

// String says it in words: the state, the batch, the op and its path,
// the errno, and what would help.
func (bl *applyBlock) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cannot apply batch %d", bl.Seq)
	if bl.Op != "" {
		fmt.Fprintf(&b, ", op %d (%s) on %q", bl.Index, bl.Op, bl.Path)
	} else {
		b.WriteString(" (syncing the volume)")
	}
	fmt.Fprintf(&b, ": %s (%s)", bl.Err, bl.Errno)
	switch {
	case bl.Refused:
		fmt.Fprintf(&b, " with %s free: the volume's file system refuses this op with room to spare, so more room is unlikely to help: "+
			"give this backup a file system that takes it (for an extended attribute larger than a block on ext4, the ea_inode feature), "+
			"or undo it on the primary and resync this backup", human.Bytes(bl.Free))
	case bl.Errno == "ENOSPC" || bl.Errno == "EDQUOT":
		fmt.Fprintf(&b, " with %s free: make room on the volume's file system (or raise the quota)", human.Bytes(bl.Free))
	}
	fmt.Fprintf(&b, "; retrying since %s (%d tries)", bl.Since.Format("15:04:05"), bl.Tries)
	return b.String()
}

// setBlocked records that batch seq failed again with err (nil: it is no
// longer blocked), counts it and tells the primary when that changes.
func (b *Backup) setBlocked(seq uint64, err error) *applyBlock {
	old := b.blocked.Load()
	if err == nil {
		if old != nil {
			b.blocked.Store(nil)
			b.m.applyBlocked.Set(0)
			b.cfg.Events.Emit(events.KindApplyUnblocked, "seq", old.Seq)
			b.notifyProgress()
		}
		return nil
	}
	bl := blockOf(seq, err, b.cfg.Volume)
	if old != nil && old.Seq == seq {
		bl.Since, bl.Tries = old.Since, old.Tries
	}
	bl.Tries++
	b.blocked.Store(bl)
	b.m.applyBlocked.Set(1)
	if old == nil || old.Seq != seq || old.Refused != bl.Refused || old.Err != bl.Err {
		b.notifyProgress()
		b.cfg.Events.Emit(events.KindApplyBlocked, "seq", seq, "err", bl.Err, "more_room_helps", !bl.Refused)
	}
	return bl
}

// blockedWords is the backup's apply failure in words, and its batch
// ("", 0: it applies).
func (b *Backup) blockedWords() (string, uint64) {
	if bl := b.blocked.Load(); bl != nil {
		return bl.String(), bl.Seq
	}
	return "", 0
}
