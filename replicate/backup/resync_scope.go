package backup

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/resyncscope"
)

// The backup's side of a targeted resync (resync_scope.go has the
// primary's). Its volume must be exactly the state its journal describes,
// up to a seq, plus what its later batches changed; it offers a targeted
// resync only when it knows that much:
//
//   - a backup: its volume holds every batch up to its applied seq, and
//     past it what its later batches (an apply window, a torn batch) did;
//     unless it stalled (an apply failed: nothing is known of its volume).
//   - a deposed primary: its volume holds every batch its journal does,
//     plus the ops of the batch that was open when it stopped, which no
//     journal holds. Those changed their inodes' ctime after its last
//     batch was sealed (the kernel's clock; no one can set a ctime), so a
//     walk of the volume finds them, and the names they removed through
//     their directories' ctime. That holds while the page cache that held
//     them lives: after an unclean stop on a machine that has rebooted
//     since, the volume and the journal's unsynced tail may both have
//     lost writes, anywhere, and only a full resync is sure.
//
// A resync that began and never ended leaves the volume in between: the
// next one is a full one.

// resyncingKey is 1 from a resync's start to its end.
var resyncingKey = journal.KeyResyncing.Name

// tailMargin: a deposed primary's walk takes in every ctime from this long
// before its last batch's seal on (the kernel stamps ctimes from a clock
// that runs up to a tick behind the one pbfs reads).
const tailMargin = 2 * time.Second

// chainDense: a backup offers the checksums of its newest batches one by
// one up to this many, then every power of two further back. A deposed
// primary's unacknowledged suffix is a few batches (what the ack window
// held); past 64 the common seq found is at most twice as far back as the
// real one, which costs only more paths.
const chainDense = 64

// The phases of a scoped resync on the backup.
const (
	phaseEntries    = iota // entries come (a full resync, or the scope is settled)
	phaseFirstScope        // the primary's own scope comes next
	phaseFinalScope        // the scope both reconcile comes next
)

// offer answers a scoped start: the newest batches' checksums and the
// volume's seq, or why only a full resync is sure.
func (r *resyncer) offer() *replpb.ResyncOffer {
	if why := r.fullOnly(); why != "" {
		return &replpb.ResyncOffer{Full: why}
	}
	chain, err := chainOf(r.b.store)
	if err != nil {
		return &replpb.ResyncOffer{Full: err.Error()}
	}
	vol := r.b.applied.Load()
	if r.b.formerEpoch > 0 {
		vol = r.b.store.Last().Seq
	}
	return &replpb.ResyncOffer{Chain: chain, VolumeSeq: vol}
}

// fullOnly says why this backup's volume needs a full resync ("" if a
// targeted one is sure).
func (r *resyncer) fullOnly() string {
	b := r.b
	last := b.store.Last()
	switch {
	case r.interrupted:
		return "an earlier resync of its volume did not finish"
	case last.Seq == 0:
		return "its journal holds no batch"
	case b.store.LostFrom() > 0:
		return "its journal lost batches"
	case b.formerEpoch > 0:
		return r.formerFullOnly(last)
	case r.wasStalled:
		return "its volume stalled (an apply failed, or its journal lost batches)"
	case b.applied.Load() > last.Seq:
		return "its volume applied batches its journal no longer holds"
	}
	return ""
}

// formerFullOnly is fullOnly for a deposed primary.
func (r *resyncer) formerFullOnly(last journal.Header) string {
	b := r.b
	if max(last.Epoch, 1) != b.formerEpoch {
		return "its last batch is not one it wrote as the primary, and nothing dates what it changed after it"
	}
	unclean, err := b.store.Unclean()
	if err != nil {
		return err.Error()
	}
	if unclean {
		boot, err := b.store.Meta(BootKey)
		if now := BootID(); err != nil || len(boot) == 0 || now == nil || !bytes.Equal(boot, now) {
			return "the machine restarted since this node stopped uncleanly as the primary: its volume and the unsynced tail of its journal may both have lost writes"
		}
	}
	if _, err := localRules(b.store); err != nil {
		return err.Error()
	}
	return ""
}

// chainOf lists the checksums of st's newest batches, newest first: the
// last chainDense one by one, then every power of two further back, and
// the first.
func chainOf(st *journal.Store) ([]*replpb.ChainLink, error) {
	last, first := st.Last().Seq, st.First()
	var out []*replpb.ChainLink
	add := func(seq uint64) error {
		h, err := st.Header(seq)
		if err != nil {
			return fmt.Errorf("read batch %d's header: %w", seq, err)
		}
		out = append(out, &replpb.ChainLink{Seq: seq, Checksum: h.Checksum})
		return nil
	}
	for seq, n := last, 0; seq >= first && seq > 0; {
		if err := add(seq); err != nil {
			return nil, err
		}
		n++
		step := uint64(1)
		if n >= chainDense {
			step = 1 << min(n-chainDense+1, 62)
		}
		if step > seq-first {
			break
		}
		seq -= step
	}
	if n := len(out); n > 0 && out[n-1].Seq != first && first > 0 {
		if err := add(first); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scopeStep takes one of the primary's Scope messages.
func (r *resyncer) scopeStep(sc *replpb.Scope) (*replpb.ResyncBackupMsg, error) {
	switch r.phase {
	case phaseFirstScope:
		if sc.Full != "" {
			r.keep(0)
			r.goFull("the primary: " + sc.Full)
			return nil, nil
		}
		r.keep(sc.Base)
		own, err := r.ownScope(sc)
		if err != nil {
			return nil, err
		}
		if own.Full != "" {
			r.goFull(own.Full)
		} else {
			r.phase = phaseFinalScope
		}
		return &replpb.ResyncBackupMsg{Msg: &replpb.ResyncBackupMsg_Scope{Scope: own}}, nil
	case phaseFinalScope:
		if sc.Full != "" {
			r.goFull("the primary: " + sc.Full)
			return nil, nil
		}
		paths := make([]string, len(sc.Subtrees))
		for i, p := range sc.Subtrees {
			paths[i] = string(p)
		}
		if err := r.rc.Limit(paths); err != nil {
			return nil, err
		}
		r.phase, r.kind = phaseEntries, resyncscope.Targeted
		r.b.log.Info("resync: targeted: only the paths the two histories touched since they parted", "seq", r.start.Seq, "subtrees", len(paths))
		return nil, nil
	}
	return nil, errors.New("resync scope out of turn")
}

func (r *resyncer) goFull(why string) {
	r.phase, r.kind = phaseEntries, resyncscope.Full
	r.b.log.Info("resync: full", "seq", r.start.Seq, "why_not_targeted", why)
}

// ownScope is this backup's answer to the primary's scope: what its own
// batches after the primary's base name, and what a walk of its volume
// finds (resync_scope.go).
func (r *resyncer) ownScope(ps *replpb.Scope) (*replpb.Scope, error) {
	b := r.b
	theirs, err := resyncscope.FromProto(ps)
	if err != nil {
		return nil, err
	}
	full := func(why string) (*replpb.Scope, error) { return &replpb.Scope{Full: why}, nil }
	last := b.store.Last()
	sc := resyncscope.New()
	if ps.Base > last.Seq {
		return full(fmt.Sprintf("the primary's base %d is past this journal's last batch %d", ps.Base, last.Seq))
	}
	if ps.Base < last.Seq {
		if first := b.store.First(); first > ps.Base+1 {
			return full(fmt.Sprintf("its journal no longer holds batch %d (it starts at %d)", ps.Base+1, first))
		}
		if err := sc.ReadBatches(b.store, ps.Base+1, last.Seq, 0); err != nil {
			return full(err.Error())
		}
	}
	var opt apply.SurveyOptions
	if b.formerEpoch > 0 {
		opt.Since = last.Created.Add(-tailMargin)
		if opt.Local, err = localRules(b.store); err != nil {
			return full(err.Error())
		}
	}
	sv, err := b.applier.Survey(opt)
	if err != nil {
		return full(err.Error())
	}
	return r.surveyed(sc, theirs, sv)
}

// surveyed adds to sc what the walk of the volume found, and makes sc the
// answer.
func (r *resyncer) surveyed(sc, theirs *resyncscope.Scope, sv *apply.Survey) (*replpb.Scope, error) {
	for _, p := range sv.Changed {
		sc.Subtree(p)
	}
	for _, p := range sv.Local {
		sc.Subtree(p)
	}
	var listings []*replpb.Listing
	size := 0
	for d, names := range sv.ChangedDirs {
		sc.Entry(d)
		l := &replpb.Listing{Dir: []byte(d), Names: make([][]byte, len(names))}
		for i, n := range names {
			l.Names[i] = []byte(n)
		}
		size += resyncscope.PathBytes(l.Names)
		listings = append(listings, l)
	}
	// Reconciling one name of a file writes every other: each must be in
	// the scope, for the primary to send what it holds there.
	union := resyncscope.New()
	union.Merge(sc)
	union.Merge(theirs)
	for _, names := range sv.Links {
		for _, p := range names {
			if union.Covers(p) {
				for _, q := range names {
					sc.Entry(q)
				}
				break
			}
		}
	}
	msg, err := sc.Proto()
	if err == nil && resyncscope.PathBytes(msg.Subtrees)+resyncscope.PathBytes(msg.Entries)+size > resyncscope.MaxBytes {
		err = fmt.Errorf("the directories its unjournaled changes touched hold too many names to list")
	}
	if err != nil {
		return &replpb.Scope{Full: err.Error()}, nil
	}
	msg.Listings = listings
	r.b.log.Info("resync scope", "subtrees", len(msg.Subtrees), "entries", len(msg.Entries),
		"changed_after_last_batch", len(sv.Changed), "changed_dirs", len(sv.ChangedDirs), "local_only", len(sv.Local), "surveyed", sv.Entries)
	return msg, nil
}
