package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	benchreport "github.com/pbfs/pbfs/benchmarks/internal/report"
	"github.com/pbfs/pbfs/control"
)

// The process helpers live in benchmarks/internal/benchproc.
type proc = benchproc.Proc

var (
	startProc     = benchproc.Start
	freeAddr      = benchproc.FreeAddr
	waitListening = benchproc.WaitListening
	mounted       = benchproc.Mounted
	mountsUnder   = benchproc.MountsUnder
)

// waitMounted waits for the primary's mount and control socket.
func waitMounted(ctx context.Context, p *proc, vol, jdir string) (*control.Client, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		if p.Exited() {
			return nil, fmt.Errorf("%s exited: %v\n%s", p.Name, p.Err, p.LogTail(20))
		}
		if mounted(vol) {
			if cl, err := control.Dial(jdir); err == nil {
				if _, err := cl.Status(ctx); err == nil {
					return cl, nil
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%s did not mount %s:\n%s", p.Name, vol, p.LogTail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// barrierApplied takes a barrier and waits until every backup has applied
// it, so the backups' volumes can be compared with the primary's.
func barrierApplied(ctx context.Context, cl *control.Client, timeout time.Duration) (uint64, error) {
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	seq, err := cl.Barrier(bctx)
	if err != nil {
		return 0, fmt.Errorf("barrier: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		st, err := cl.Status(ctx)
		if err != nil {
			return seq, err
		}
		done := 0
		for _, b := range st.Backups {
			if b.AppliedSeq >= seq {
				done++
			}
		}
		if done == len(st.Backups) {
			return seq, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return seq, fmt.Errorf("backups did not apply seq %d: %+v", seq, st.Backups)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metrics maps a Prometheus series (name{labels}) to its value.
type metrics map[string]float64

func scrape(ctx context.Context, cl *control.Client) (metrics, error) {
	text, err := cl.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	m := metrics(benchreport.ParseMetrics(text))
	return m, nil
}

// sum adds the series of metric name whose labels contain label.
func (m metrics) sum(name, label string) float64 { return benchreport.SumSeries(m, name, label) }

// errs joins the non-nil errors.
func errs(list ...error) error { return errors.Join(list...) }
