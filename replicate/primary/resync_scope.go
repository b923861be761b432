package primary

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/capture"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/resyncscope"
)

// The primary's side of a targeted resync. After the snapshot S and a
// scoped ResyncStart, the backup offers the checksums of its newest
// batches; the primary finds P, the newest seq both journals hold alike
// (the Prev chain makes every seq below it alike too), and base, P or the
// backup's volume seq if lower. Its scope is what its batches base+1..S
// name; the backup answers with what its own batches after base name, and
// what a walk of its volume found (a deposed primary's unjournaled tail,
// its local-only files, other names of the files in scope). The primary
// sends the union, and then only the snapshot's entries in it. A full
// resync is the answer whenever one of them cannot say.

// Limits of the primary's side of a targeted resync.
const (
	// maxChain bounds the links a primary looks at.
	maxChain = 256
	// minJournalBudget: a targeted resync reads the batches of both
	// histories since they parted; it gives up for a full one when they
	// hold more bytes than the volume's files (reading them would cost
	// more than comparing the files), but always allows this much.
	minJournalBudget = 64 << 20
)

// maxScopeShare: a scope that holds more than this share of the snapshot's
// entries is resynced in full. A targeted resync spends on each entry in
// scope what a full one does, and on top of it reads the batches since the
// histories parted and walks the backup's volume (stats only): past half
// the entries it would save less than half a full resync's work, while a
// full one is the simpler, older path.
const maxScopeShare = 0.5

// resyncPlan is what a resync sends.
type resyncPlan struct {
	kind     string
	why      string // a full one: why not targeted
	send     []bool // a targeted one: the entries it sends
	subtrees int
	n        int // entries sent
}

func fullPlan(why string) *resyncPlan { return &resyncPlan{kind: resyncscope.Full, why: why} }

func (p *resyncPlan) sends(i int) bool { return p.send == nil || p.send[i] }

// scopeRefused says why this resync cannot be a targeted one before it
// starts ("" if it may be).
func (s *Shipper) scopeRefused(forced bool) string {
	switch ahead, err := s.store.MetaUint(journal.KeyAhead.Name); {
	case err != nil:
		return fmt.Sprintf("read %s: %v", journal.KeyAhead.Name, err)
	case ahead > 0:
		return "this primary's volume may be ahead of its journal (an unclean stop or an offline change)"
	case forced:
		return "an operator asked for it"
	case !s.resyncScope.Load():
		return "the backup takes only full resyncs (a version from before targeted ones)"
	}
	return ""
}

// negotiate agrees with the backup, after a scoped ResyncStart, on what the
// resync reconciles.
func (s *Shipper) negotiate(stream replpb.Replication_ResyncClient, hdr journal.Header, entries []capture.Entry, total uint64) (*resyncPlan, error) {
	msg, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	offer := msg.GetOffer()
	if offer == nil {
		return nil, errors.New("resync: the backup did not answer a scoped start with its offer")
	}
	var (
		mine *resyncscope.Scope
		base uint64
		why  = offer.Full
	)
	if why != "" {
		why = "the backup: " + why
	} else {
		base, mine, why = s.ownScope(offer, hdr.Seq, int64(max(total, minJournalBudget)))
	}
	var first *replpb.Scope
	if why == "" {
		if first, err = mine.Proto(); err != nil {
			why = err.Error()
		} else {
			first.Base = base
		}
	}
	if why != "" {
		first = &replpb.Scope{Full: why}
	}
	if err := sendScope(stream, first); err != nil {
		return nil, err
	}
	if why != "" {
		return fullPlan(why), nil
	}
	if msg, err = stream.Recv(); err != nil {
		return nil, err
	}
	theirs := msg.GetScope()
	if theirs == nil {
		return nil, errors.New("resync: the backup did not answer with its scope")
	}
	if theirs.Full != "" {
		return fullPlan("the backup: " + theirs.Full), nil // it goes full too
	}
	plan, final, why := s.plan(mine, theirs, entries)
	if why != "" {
		return fullPlan(why), sendScope(stream, &replpb.Scope{Full: why})
	}
	return plan, sendScope(stream, final)
}

func sendScope(stream replpb.Replication_ResyncClient, sc *replpb.Scope) error {
	return stream.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Scope{Scope: sc}})
}

// ownScope finds base from the backup's offer and reads what this
// journal's batches base+1..seq name; why says why not, if it cannot.
func (s *Shipper) ownScope(offer *replpb.ResyncOffer, seq uint64, budget int64) (uint64, *resyncscope.Scope, string) {
	common, ok := s.commonSeq(offer.Chain, seq)
	if !ok {
		return 0, nil, "no batch the backup offered is in this primary's journal alike (their histories parted before this journal's first batch)"
	}
	base := min(common, offer.VolumeSeq)
	if first := s.store.First(); base < seq && first > base+1 {
		return 0, nil, fmt.Sprintf("this primary's journal no longer holds batch %d (it starts at %d)", base+1, first)
	}
	sc := resyncscope.New()
	if err := sc.ReadBatches(s.store, base+1, seq, budget); err != nil {
		return 0, nil, err.Error()
	}
	return base, sc, ""
}

// commonSeq is the newest seq of chain, up to max, that this journal holds
// with the same checksum (through the Prev of the batch after it, for the
// one just before the journal's first).
func (s *Shipper) commonSeq(chain []*replpb.ChainLink, max uint64) (uint64, bool) {
	var best uint64
	found := false
	for i, l := range chain {
		if i == maxChain {
			break
		}
		if l.Seq > max || (found && l.Seq <= best) {
			continue
		}
		if s.holdsAlike(l.Seq, l.Checksum) {
			best, found = l.Seq, true
		}
	}
	return best, found
}

func (s *Shipper) holdsAlike(seq uint64, sum uint32) bool {
	if h, err := s.store.Header(seq); err == nil {
		return h.Checksum == sum
	}
	if seq+1 == s.store.First() {
		h, err := s.store.Header(seq + 1)
		return err == nil && h.Prev == sum
	}
	return false
}

// plan joins the two scopes, settles the backup's listings against the
// snapshot, and picks the entries to send: every one in the scope, and
// every other name of a file among them. It returns the final scope for
// the backup, or why the resync is a full one after all.
func (s *Shipper) plan(mine *resyncscope.Scope, theirs *replpb.Scope, entries []capture.Entry) (*resyncPlan, *replpb.Scope, string) {
	sc, err := resyncscope.FromProto(theirs)
	if err != nil {
		return nil, nil, err.Error()
	}
	sc.Merge(mine)
	if err := settleListings(sc, theirs.Listings, entries); err != nil {
		return nil, nil, err.Error()
	}
	if sc.Whole() {
		return nil, nil, "the scope is the whole volume"
	}
	final := &replpb.Scope{Subtrees: sc.Subtrees()}
	plan := &resyncPlan{kind: resyncscope.Targeted, send: make([]bool, len(entries)), subtrees: len(final.Subtrees)}
	links := map[uint64][]int{}
	for i := range entries {
		e := &entries[i]
		plan.send[i] = sc.Covers(e.Path)
		if e.Stat.Mode&unix.S_IFMT != unix.S_IFDIR && e.Stat.Nlink > 1 {
			links[e.Stat.Ino] = append(links[e.Stat.Ino], i)
		}
	}
	for _, group := range links {
		if anySent(plan.send, group) {
			for _, i := range group {
				plan.send[i] = true
			}
		}
	}
	for _, b := range plan.send {
		if b {
			plan.n++
		}
	}
	if float64(plan.n) > maxScopeShare*float64(len(entries)) {
		return nil, nil, fmt.Sprintf("the paths to resync hold %d of the snapshot's %d entries", plan.n, len(entries))
	}
	if n := resyncscope.PathBytes(final.Subtrees); n > resyncscope.MaxBytes {
		return nil, nil, fmt.Sprintf("%d subtrees (%d bytes) are too many to list", len(final.Subtrees), n)
	}
	return plan, final, ""
}

func anySent(send []bool, group []int) bool {
	for _, i := range group {
		if send[i] {
			return true
		}
	}
	return false
}

// settleListings turns each directory the backup listed (one its
// unjournaled tail changed) into subtrees: every name that only one side
// holds there, or the directory itself where this side has no directory.
func settleListings(sc *resyncscope.Scope, listings []*replpb.Listing, entries []capture.Entry) error {
	if len(listings) == 0 {
		return nil
	}
	want := map[string]map[string]bool{} // dir -> the names this side holds (nil: not a directory here)
	for _, l := range listings {
		if d := string(l.Dir); !journal.ValidPath(d) {
			return fmt.Errorf("resync listing %q: %w", l.Dir, journal.ErrInvalidOp)
		}
		want[string(l.Dir)] = nil
	}
	for i := range entries {
		e := &entries[i]
		if _, ok := want[e.Path]; ok && e.Stat.Mode&unix.S_IFMT == unix.S_IFDIR && e.LinkTo == "" {
			want[e.Path] = map[string]bool{}
		}
	}
	for i := range entries {
		p := entries[i].Path
		if p == "." {
			continue
		}
		if names := want[resyncscope.Parent(p)]; names != nil {
			names[baseName(p)] = true
		}
	}
	for _, l := range listings {
		d := string(l.Dir)
		ours := want[d]
		if ours == nil {
			sc.Subtree(d)
			continue
		}
		sc.Entry(d)
		theirs := make(map[string]bool, len(l.Names))
		for _, b := range l.Names {
			name := string(b)
			if !validName(name) {
				return fmt.Errorf("resync listing of %q: name %q: %w", d, b, journal.ErrInvalidOp)
			}
			theirs[name] = true
			if !ours[name] {
				sc.Subtree(childPath(d, name))
			}
		}
		for name := range ours {
			if !theirs[name] {
				sc.Subtree(childPath(d, name))
			}
		}
	}
	return nil
}

// baseName is p's last name.
func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

// validName reports whether name can be one name in a directory.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsRune(name, '/') && journal.ValidPath(name)
}

// childPath is name in dir.
func childPath(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}
