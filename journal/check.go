package journal

import (
	"bufio"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// An open checks the bodies of the batch log's newest segment only (a
// crash can tear them); reading every older one would hold up a start by as
// long as reading the whole journal. So damage done to an older segment
// after it was written shows only when something reads the batch: Get
// checks what it reads from the disk (segread.go), and CheckBatches,
// which a mount and a backup run in the background once they serve,
// reads every older segment through and checks each record's body
// against its CRC. What either finds is logged, counted
// (pbfs_journal_damaged_batches) and shown by BatchCheck (pbfs status).

// maxDamageLines bounds the lines one check logs, one per damaged run of
// batches; the rest are counted in one more line.
const maxDamageLines = 10

// DamagedRange is a run of batches of one segment whose records fail
// their checksums.
type DamagedRange struct {
	First, Last uint64
	Segment     string // the segment file's name
}

func (r DamagedRange) String() string {
	if r.First == r.Last {
		return fmt.Sprintf("batch %d in segment %s", r.First, r.Segment)
	}
	return fmt.Sprintf("batches %d-%d in segment %s", r.First, r.Last, r.Segment)
}

// BatchCheck is what the check of the batch log found so far.
type BatchCheck struct {
	Started bool   // CheckBatches began
	Done    bool   // and read every segment it was to read
	Checked uint64 // batches it checked
	Total   uint64 // batches it is to check
	Took    time.Duration
	// Damaged are the runs of damaged batches the journal still holds,
	// found by the check or by a read.
	Damaged []DamagedRange
}

// DamagedBatches counts the batches in Damaged.
func (c BatchCheck) DamagedBatches() uint64 {
	n := uint64(0)
	for _, r := range c.Damaged {
		n += r.Last - r.First + 1
	}
	return n
}

// String says it in words, for pbfs status.
func (c BatchCheck) String() string {
	var s string
	switch {
	case !c.Started:
		s = "not checked"
	case !c.Done:
		s = fmt.Sprintf("checking every batch's checksum: %d of %d", c.Checked, c.Total)
	default:
		s = fmt.Sprintf("every batch's checksum checked (%d in %v)", c.Checked, c.Took.Round(time.Millisecond))
	}
	if len(c.Damaged) == 0 {
		return s
	}
	runs := make([]string, len(c.Damaged))
	for i, r := range c.Damaged {
		runs[i] = r.String()
	}
	return fmt.Sprintf("%s; %d damaged on disk: %s; a backup that needs them is resynced from the volume", s, c.DamagedBatches(), strings.Join(runs, ", "))
}

// integrity holds what the check and reads found.
type integrity struct {
	mu      sync.Mutex
	check   BatchCheck
	damaged []DamagedRange // sorted by First, disjoint
}

// noteDamaged records batches first..last of segment path as damaged and
// reports whether any of them was not known to be.
func (in *integrity) noteDamaged(first, last uint64, path string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	seg := filepath.Base(path)
	for _, r := range in.damaged {
		if r.First <= first && last <= r.Last {
			return false
		}
	}
	in.damaged = append(in.damaged, DamagedRange{First: first, Last: last, Segment: seg})
	slices.SortFunc(in.damaged, func(a, b DamagedRange) int { return cmpU64(a.First, b.First) })
	merged := in.damaged[:1]
	for _, r := range in.damaged[1:] {
		if p := &merged[len(merged)-1]; p.Segment == r.Segment && r.First <= p.Last+1 {
			p.Last = max(p.Last, r.Last)
		} else {
			merged = append(merged, r)
		}
	}
	in.damaged = merged
	return true
}

// forget drops every damaged run: the log was replaced.
func (in *integrity) forget() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.damaged = nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// BatchCheck returns what the check and reads found, without the batches
// trimmed or replaced since.
func (s *Store) BatchCheck() BatchCheck {
	first, last := s.bl.bounds()
	s.integ.mu.Lock()
	defer s.integ.mu.Unlock()
	c := s.integ.check
	c.Damaged = nil
	for _, r := range s.integ.damaged {
		if r.Last < first || r.First > last {
			continue
		}
		r.First = max(r.First, first)
		c.Damaged = append(c.Damaged, r)
	}
	return c
}

// CheckBatches reads every segment of the batch log but the newest, which
// the open checked, and checks each record's body against its CRC. It
// logs each run of damaged batches it finds (naming the batches and the
// segment) and, at the end, what it checked. It returns when it is done or
// ctx ends; the caller waits for it before it closes the store.
func (s *Store) CheckBatches(ctx context.Context) {
	start := time.Now()
	segs := s.bl.olderSegments()
	total := uint64(0)
	for _, seg := range segs {
		total += uint64(seg.n)
	}
	s.setCheck(func(c *BatchCheck) { c.Started, c.Total = true, total })
	lines, runs := 0, 0
	for _, seg := range segs {
		bad, why, err := checkSegment(ctx, seg)
		if ctx.Err() != nil {
			return
		}
		if !s.bl.holds(seg.seg) {
			continue // trimmed while it was read, perhaps recycled: what was read says nothing
		}
		if err != nil {
			s.log.Warn("journal: could not check a segment of the batch log", "segment", seg.seg.path, "err", err)
			continue
		}
		for _, r := range bad {
			if !s.integ.noteDamaged(r.First, r.Last, seg.seg.path) {
				continue
			}
			runs++
			if lines++; lines <= maxDamageLines {
				s.log.Error("journal: batches damaged on disk since they were written: their records fail their checksums; a backup that still needs them is resynced from the volume (pbfs journal verify names each)",
					"first", r.First, "last", r.Last, "segment", seg.seg.path, "found", why)
			}
		}
		s.setCheck(func(c *BatchCheck) { c.Checked += uint64(seg.n) })
	}
	took := time.Since(start)
	s.setCheck(func(c *BatchCheck) { c.Done, c.Took = true, took })
	if lines > maxDamageLines {
		s.log.Error("journal: more runs of damaged batches than logged above", "more", lines-maxDamageLines)
	}
	if runs == 0 {
		s.log.Info("journal: every batch's checksum checked", "batches", total, "segments", len(segs), "took", took.Round(time.Millisecond))
	}
}

func (s *Store) setCheck(f func(*BatchCheck)) {
	s.integ.mu.Lock()
	defer s.integ.mu.Unlock()
	f(&s.integ.check)
}

// oldSeg is a segment CheckBatches reads, as it was when it began.
type oldSeg struct {
	seg   *segFile
	first uint64
	n     int
	end   int64
}

// olderSegments returns every segment but the newest.
func (l *batchLog) olderSegments() []oldSeg {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []oldSeg
	for _, seg := range l.segs {
		if seg != l.wseg && seg != l.segs[len(l.segs)-1] {
			out = append(out, oldSeg{seg: seg, first: seg.first, n: seg.n, end: seg.end})
		}
	}
	return out
}

// holds reports whether seg is still one of the log's segments.
func (l *batchLog) holds(seg *segFile) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return slices.Contains(l.segs, seg)
}

// checkSegment reads seg's records and returns the runs of them whose
// bodies fail their CRC, and how the first failed. A record header that no
// longer parses, or a read that fails, fails the rest of the segment. It
// fails when it cannot open the segment or ctx ends.
func checkSegment(ctx context.Context, seg oldSeg) ([]DamagedRange, string, error) {
	last := seg.first + uint64(seg.n) - 1
	f, err := os.Open(seg.seg.path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	// Read once, by this check: the pages would push the service's out.
	defer unix.Fadvise(int(f.Fd()), 0, seg.end, unix.FADV_DONTNEED)
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, seg.end), 1<<20)
	var bad []DamagedRange
	why := ""
	fail := func(from, to uint64, reason string) {
		if n := len(bad); n > 0 && bad[n-1].Last+1 == from {
			bad[n-1].Last = to
		} else {
			bad = append(bad, DamagedRange{First: from, Last: to})
		}
		if why == "" {
			why = reason
		}
	}
	hdr := make([]byte, recHdrSize)
	var body []byte
	for seq := seg.first; seq <= last; seq++ {
		if (seq-seg.first)%256 == 0 && ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		if _, err := io.ReadFull(r, hdr); err != nil {
			fail(seq, last, fmt.Sprintf("read batch %d: %v", seq, err))
			break
		}
		rh, err := parseRecordHeader(hdr)
		if err != nil || rh.seq != seq {
			fail(seq, last, fmt.Sprintf("the record header of batch %d no longer parses", seq))
			break
		}
		body = growTo(body, int(rh.n))
		if _, err := io.ReadFull(r, body); err != nil {
			fail(seq, last, fmt.Sprintf("read batch %d: %v", seq, err))
			break
		}
		if crc32.Checksum(body, castagnoliTable) != rh.bodyCRC {
			fail(seq, seq, fmt.Sprintf("the body of batch %d fails its checksum", seq))
		}
	}
	for i := range bad {
		bad[i].Segment = filepath.Base(seg.seg.path)
	}
	return bad, why, nil
}

// CheckCollectors are the check's metrics, for the caller's registry.
func (s *Store) CheckCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pbfs_journal_damaged_batches", Help: "Batches the journal holds whose records fail their checksums on disk, found by the check after the start or by a read.",
		}, func() float64 { return float64(s.BatchCheck().DamagedBatches()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pbfs_journal_checked_batches", Help: "Batches the check after the start has read and checked so far.",
		}, func() float64 { return float64(s.BatchCheck().Checked) }),
	}
}
