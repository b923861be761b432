package journal

// recent keeps the bodies of the newest records appended to a batch log,
// so that reading them back just after the append costs no pread and no
// copy: a primary's shippers, one per backup, read every batch it seals,
// and a backup's applier every batch it stores. It holds at most
// recentSlots records and recentBytes of memory for them (counted by
// capacity: a body keeps its whole buffer alive); a body above a quarter
// of that is not kept. The bodies are shared by every reader, who must not
// modify them. Its owner's lock guards it.
type recent struct {
	slots [recentSlots]recentRec
	lo    uint64 // the oldest seq that may be held (0: none is)
	hi    uint64 // the newest seq held
	bytes int
}

type recentRec struct {
	seq  uint64
	body []byte
}

const (
	recentSlots = 256
	recentBytes = 8 << 20
)

// add keeps body as seq, which must follow the newest seq held; anything
// else starts the ring over.
func (r *recent) add(seq uint64, body []byte) {
	if r.lo == 0 || seq != r.hi+1 {
		r.reset()
		r.lo = seq
	}
	r.hi = seq
	if cap(body) > recentBytes/4 {
		body = nil
	}
	s := &r.slots[seq%recentSlots]
	r.bytes += cap(body) - cap(s.body)
	*s = recentRec{seq: seq, body: body}
	for r.lo < seq && (r.bytes > recentBytes || seq-r.lo >= recentSlots) {
		r.drop(r.lo)
		r.lo++
	}
}

func (r *recent) drop(seq uint64) {
	if s := &r.slots[seq%recentSlots]; s.seq == seq {
		r.bytes -= cap(s.body)
		*s = recentRec{}
	}
}

// get returns the body of seq if the ring holds it.
func (r *recent) get(seq uint64) []byte {
	if seq < r.lo || seq > r.hi {
		return nil
	}
	if s := &r.slots[seq%recentSlots]; s.seq == seq {
		return s.body
	}
	return nil
}

// reset forgets every body.
func (r *recent) reset() {
	*r = recent{}
}
