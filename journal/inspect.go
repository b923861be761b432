package journal

import (
	"fmt"
)

// Source is read access to a journal: the Store itself, or a running
// mount's control socket when the mount holds the Store's lock.
type Source interface {
	Get(seq uint64) ([]byte, error)
	Scan(from uint64, fn func(seq uint64, enc []byte) error) error
}

// Checked is one batch as Walk saw it.
type Checked struct {
	Seq    uint64 // the key it is stored under
	Header Header
	Size   int    // stored bytes
	Batch  *Batch // decoded, when Walk was asked to decode
	Err    error  // what is wrong with it, nil if nothing
}

// Walk reads batches from..to (to 0 means the end), checking each one's
// header, checksums and body, and the chain: seqs consecutive and equal to
// their keys, each Prev equal to the previous batch's checksum, epochs
// never decreasing. fn sees every batch; Walk returns the number of
// batches with problems.
func Walk(src Source, from, to uint64, decode bool, fn func(c Checked) error) (int, error) {
	bad := 0
	var prev *Header
	err := src.Scan(from, func(seq uint64, enc []byte) error {
		if to != 0 && seq > to {
			return errStop
		}
		c := Checked{Seq: seq, Size: len(enc)}
		if decode {
			b, err := Decode(enc)
			c.Err = err
			if err == nil {
				c.Batch = b
				c.Header, _ = DecodeHeader(enc)
			}
		} else {
			c.Header, c.Err = Verify(enc)
		}
		if c.Err == nil {
			c.Err = chainError(prev, seq, &c.Header)
		}
		if c.Err != nil {
			bad++
			prev = nil
		} else {
			h := c.Header
			prev = &h
		}
		return fn(c)
	})
	if err == errStop {
		err = nil
	}
	return bad, err
}

var errStop = fmt.Errorf("stop")

func chainError(prev *Header, key uint64, h *Header) error {
	if h.Seq != key {
		return fmt.Errorf("stored under seq %d but says %d: %w", key, h.Seq, ErrCorrupt)
	}
	if prev == nil {
		return nil
	}
	if h.Seq != prev.Seq+1 {
		return fmt.Errorf("seq %d follows %d: gap in the chain: %w", h.Seq, prev.Seq, ErrCorrupt)
	}
	if h.Prev != prev.Checksum {
		return fmt.Errorf("batch %d links to checksum %08x, batch %d has %08x: %w", h.Seq, h.Prev, prev.Seq, prev.Checksum, ErrCorrupt)
	}
	if h.Epoch < prev.Epoch {
		return fmt.Errorf("batch %d has epoch %d below %d: %w", h.Seq, h.Epoch, prev.Epoch, ErrCorrupt)
	}
	return nil
}

// Stats totals a journal.
type Stats struct {
	Batches  int
	FirstSeq uint64
	LastSeq  uint64
	Ops      map[Kind]int
	OpCount  int
	Written  uint64 // bytes the service wrote
	Payload  uint64 // write and xattr bytes after coalescing
	Raw      uint64 // encoded bodies, uncompressed
	Stored   uint64 // as stored, compressed, with headers
	Corrupt  int
}

// Collect reads every batch and totals it.
func Collect(src Source) (Stats, error) {
	s := Stats{Ops: map[Kind]int{}}
	_, err := Walk(src, 0, 0, true, func(c Checked) error {
		if c.Err != nil {
			s.Corrupt++
			return nil
		}
		if s.Batches == 0 {
			s.FirstSeq = c.Seq
		}
		s.Batches++
		s.LastSeq = c.Seq
		s.Written += c.Batch.Written
		s.Raw += uint64(c.Header.RawLen)
		s.Stored += uint64(c.Size)
		s.Payload += uint64(c.Batch.DataBytes())
		for i := range c.Batch.Ops {
			s.Ops[c.Batch.Ops[i].Kind]++
			s.OpCount++
		}
		return nil
	})
	return s, err
}
