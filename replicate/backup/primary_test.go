package backup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pbfs/pbfs/replicate/internal/repltest"
	"github.com/pbfs/pbfs/replicate/primary"
)

// replicateOnce journals one batch on a fresh primary, waits for the
// backup at addr to ack it and calls up with the primary and its registry
// while the stream is still up.
func replicateOnce(t *testing.T, addr string, up func(*primary.Primary, *prometheus.Registry)) {
	t.Helper()
	st := repltest.StoreWithOneBatch(t)
	reg := prometheus.NewRegistry()
	p, err := primary.Start(primary.Config{Backups: []string{addr}, Ack: "all", Token: "right", VolumeID: "v", Store: st, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.Wait(ctx, 1); err != nil {
		t.Fatalf("batch 1 not acked: %v (%s)", err, p.Status()[0].State)
	}
	up(p, reg)
}

func rawGauge(t *testing.T, reg *prometheus.Registry, addr string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "pbfs_replicate_stream_raw" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == addr {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestPrimaryStreamsRaw: a primary streams to a backup over a raw stream,
// and to a backup from before raw streams over gRPC; both hold the batch.
func TestPrimaryStreamsRaw(t *testing.T) {
	for _, c := range []struct {
		grpcOnly bool
		raw      float64
	}{{false, 1}, {true, 0}} {
		b, ln := repltest.OpenBackup(t, "127.0.0.1:0")
		addr := ln.Addr().String()
		if c.grpcOnly {
			go b.ServeGRPCOnly(ln)
		} else {
			go b.Serve(ln)
		}
		replicateOnce(t, addr, func(p *primary.Primary, reg *prometheus.Registry) {
			if got := rawGauge(t, reg, addr); got != c.raw {
				t.Errorf("grpcOnly %v: pbfs_replicate_stream_raw %v, want %v", c.grpcOnly, got, c.raw)
			}
			// An operator is told of a backup that streams over gRPC.
			if said := p.Status()[0].State; strings.Contains(said, "over gRPC") != c.grpcOnly {
				t.Errorf("grpcOnly %v: the backup is described as %q", c.grpcOnly, said)
			}
		})
		if got := b.Status().DurableSeq; got != 1 {
			t.Fatalf("grpcOnly %v: backup holds seq %d, want 1", c.grpcOnly, got)
		}
	}
}
