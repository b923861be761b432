package main

import (
	"fmt"
	"strings"
	"time"
)

// meanMS is a histogram's mean over the point in ms; ok is false when it
// has no samples.
func (m metrics) meanMS(name string) (v float64, ok bool) {
	n := m.sum(name+"_count", "")
	if n == 0 {
		return 0, false
	}
	return m.sum(name+"_sum", "") / n * 1e3, true
}

// stage is one part of a barrier in the breakdown, as the histogram that
// times it.
type stage struct {
	head   string
	metric string
}

// stages are the parts of a barrier, in the order it passes them. The
// backup's store is part of the ack wait.
var stages = []stage{
	{"flush round", "pbfs_fs_flush_seconds"},
	{"seal + append", "pbfs_journal_commit_seconds"},
	{"ack wait", "pbfs_replicate_barrier_seconds"},
	{"backup store", "pbfs_backup_store_seconds"},
	{"local sync", "pbfs_journal_sync_seconds"},
}

// writeBreakdown splits each point's mean barrier into its parts, each
// the mean of the histogram that times it (so they add up only roughly:
// a commit can cover several barriers, a backup's store several batches).
// viaFsync: the barriers were the writer's fsyncs, which the mount times
// in pbfs_fs_fsync_barrier_seconds and which make no flush round.
func writeBreakdown(b *strings.Builder, pts []*point, viaFsync bool) {
	whole, outside := "pbfs_barrier_seconds", "the control socket's HTTP round trip and the wake-ups at both ends"
	if viaFsync {
		whole, outside = "pbfs_fs_fsync_barrier_seconds", "the FUSE FSYNC request's round trip and the wake-ups at both ends"
	}
	b.WriteString("\n## Where a barrier's time goes\n\n")
	fmt.Fprintf(b, "Means in ms. outside the mount: the client's mean minus the mount's own (`%s`):\n", whole)
	fmt.Fprintf(b, "%s. Then, inside the mount: the flush\n", outside)
	b.WriteString("round (`pbfs_fs_flush_seconds`; a replicated fsync makes none), seal and append (`pbfs_journal_commit_seconds`, per batch), the ack wait\n")
	b.WriteString("(`pbfs_replicate_barrier_seconds`) and, with no backup, the journal's sync (`pbfs_journal_sync_seconds`).\n")
	b.WriteString("The ack wait holds the backup's check and synced append (`pbfs_backup_store_seconds`, per group of\n")
	b.WriteString("batches that arrived together); the rest of it is shipping, both network legs and the wake-ups.\n\n")
	b.WriteString("| workload | added delay each way | backups | client mean | outside the mount | in the mount |")
	for _, s := range stages {
		b.WriteString(" " + s.head + " |")
	}
	b.WriteString(" ack wait less backup store |\n|---|---|---:|---:|---:|---:|")
	b.WriteString(strings.Repeat("---:|", len(stages)+1) + "\n")
	for _, r := range pts {
		if len(r.lat) == 0 {
			continue
		}
		var sum time.Duration
		for _, l := range r.lat {
			sum += l
		}
		client := float64(sum/time.Duration(len(r.lat))) / 1e6
		inside, ok := r.m.meanMS(whole)
		fmt.Fprintf(b, "| %s | %s | %d | %.3f | %s | %s |", workload(r.size), delayName(r.delay), r.backups, client,
			msOr(client-inside, ok), msOr(inside, ok))
		for _, s := range stages {
			v, ok := r.m.meanMS(s.metric)
			fmt.Fprintf(b, " %s |", msOr(v, ok))
		}
		wait, okW := r.m.meanMS("pbfs_replicate_barrier_seconds")
		store, okS := r.m.meanMS("pbfs_backup_store_seconds")
		fmt.Fprintf(b, " %s |\n", msOr(wait-store, okW && okS))
	}
}

func msOr(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.3f", v)
}
