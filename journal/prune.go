package journal

// PruneTemporaries drops files that were created and destroyed inside one
// batch from ns, the batch's namespace ops in capture order, and returns the
// ops that remain. A file qualifies when its first op creates it, no op
// links, renames or exchanges it, and it is destroyed by an unlink or rmdir
// or by being replaced as a rename's target; a directory qualifies only
// when no remaining op names anything inside it. The destroying rename is
// kept (it still moves its source). Data and metadata ops for such files
// never reach the batch: they have no path when the batch is sealed.
func PruneTemporaries(ns []Op) []Op {
	type life struct {
		create, destroy int // op indexes; -1 if none
		pinned          bool
	}
	files := map[uint64]*life{}
	get := func(fid uint64) *life {
		l := files[fid]
		if l == nil {
			l = &life{create: -1, destroy: -1}
			files[fid] = l
		}
		return l
	}
	for i := range ns {
		op := &ns[i]
		if op.Fid == 0 {
			continue
		}
		l := get(op.Fid)
		switch {
		case op.Kind.creates() && l.create < 0 && l.destroy < 0 && !l.pinned:
			l.create = i
		case (op.Kind == KindUnlink || op.Kind == KindRmdir) && l.destroy < 0:
			l.destroy = i
		default:
			l.pinned = true
		}
		if op.Kind == KindRename && op.Fid2 != 0 {
			l2 := get(op.Fid2)
			if op.Flags&RenameExchange != 0 || l2.destroy >= 0 {
				l2.pinned = true
			} else {
				l2.destroy = i
			}
		}
	}
	drop := make([]bool, len(ns))
	// children counts ops that stay and are addressed inside a directory.
	children := map[uint64]int{}
	for i := range ns {
		children[ns[i].Parent]++
		if ns[i].Kind == KindRename || ns[i].Kind == KindLink {
			children[ns[i].Parent2]++
		}
	}
	for changed := true; changed; {
		changed = false
		for fid, l := range files {
			if l.pinned || l.create < 0 || l.destroy < 0 || drop[l.create] || children[fid] > 0 {
				continue
			}
			drop[l.create] = true
			children[ns[l.create].Parent]--
			if d := &ns[l.destroy]; d.Fid == fid {
				drop[l.destroy] = true
				children[d.Parent]--
			}
			changed = true
		}
	}
	out := ns[:0:0]
	for i := range ns {
		if !drop[i] {
			out = append(out, ns[i])
		}
	}
	return out
}
