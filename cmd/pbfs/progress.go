package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/human"
	"github.com/pbfs/pbfs/journal"
)

// Long operations (replay, verify, a resync pbfs resync waits for) show
// their progress: a bar with rate and ETA when stderr is a terminal,
// otherwise a plain line every few seconds, for logs.

type progress struct {
	what  string
	unit  string
	total int64
	done  int64
	start time.Time
	last  time.Time
	w     io.Writer
	bar   *progressbar.ProgressBar
}

// progressEvery is how often a non-terminal gets a line
// (PBFS_PROGRESS_EVERY, a duration; default 5 s).
var progressEvery = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PBFS_PROGRESS_EVERY")); err == nil && d > 0 {
		return d
	}
	return 5 * time.Second
}()

func newProgress(w io.Writer, what, unit string, total int64) *progress {
	p := &progress{what: what, unit: unit, total: total, start: time.Now(), last: time.Now(), w: w}
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		p.bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString(unit),
			progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(100*time.Millisecond))
	}
	return p
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// set records how far the operation is.
func (p *progress) set(done int64) {
	p.done = done
	if p.bar != nil {
		p.bar.Set64(done)
		return
	}
	if time.Since(p.last) < progressEvery || p.total == 0 {
		return // too soon, or nothing known yet
	}
	p.last = time.Now()
	fmt.Fprintln(p.w, p.line())
}

// line describes the progress: done of total, percent, rate and ETA.
func (p *progress) line() string {
	el := time.Since(p.start).Seconds()
	rate := float64(p.done) / max(el, 1e-3)
	s := fmt.Sprintf("%s: %d of %d %s (%.0f %%), %.0f %s/s", p.what, p.done, p.total, p.unit,
		100*float64(p.done)/float64(max(p.total, 1)), rate, p.unit)
	if p.unit == "B" {
		s = fmt.Sprintf("%s: %s of %s (%.0f %%), %s/s", p.what, human.Bytes(p.done), human.Bytes(p.total),
			100*float64(p.done)/float64(max(p.total, 1)), human.Bytes(int64(rate)))
	}
	if rate > 0 && p.done < p.total {
		s += fmt.Sprintf(", ETA %v", time.Duration(float64(p.total-p.done)/rate*float64(time.Second)).Round(time.Second))
	}
	return s
}

// setTotal changes what the operation goes to.
func (p *progress) setTotal(total int64) {
	if total == p.total {
		return
	}
	p.total = total
	if p.bar != nil {
		p.bar.ChangeMax64(total)
	}
}

// finish ends the bar.
func (p *progress) finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

// lastSeq is the newest batch a journal source holds (0 if unknown): the
// total a walk over it goes to, counted in seqs.
func lastSeq(src journal.Source) uint64 {
	switch s := src.(type) {
	case *journal.Store:
		return s.Last().Seq
	case *control.Client:
		if st, err := s.Status(context.Background()); err == nil {
			return st.LastSeq
		}
	}
	return 0
}
