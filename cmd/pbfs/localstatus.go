package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/human"
)

// localStatus prints one running primary's or backup's status, from its
// control socket.
func localStatus(c *cli.Context) error {
	cl, err := control.Dial(c.String("journal"))
	if err != nil {
		return cli.Exit("status: "+err.Error(), 1)
	}
	st, err := cl.Status(c.Context)
	if err != nil {
		return cli.Exit(err.Error(), 1) // "status: ..."
	}
	w := c.App.Writer
	if c.Bool("json") {
		return printJSON(c, st)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "role\t%s\nvolume\t%s\nvolume id\t%s\nepoch\t%d\n", st.Role, st.Volume, st.VolumeID, st.Epoch)
	if st.JournalBytes > 0 || st.JournalFree > 0 {
		fmt.Fprintf(tw, "journal\t%s on disk; %s free on its file system, %s of it kept in reserve (room for %s more)\n",
			human.Bytes(st.JournalBytes), human.Bytes(st.JournalFree), human.Bytes(st.JournalReserve), human.Bytes(max(0, st.JournalFree-st.JournalReserve)))
	}
	if st.JournalCheck != "" {
		fmt.Fprintf(tw, "journal check\t%s\n", st.JournalCheck)
	}
	if b := st.Backup; b != nil {
		state := "applying"
		switch {
		case b.Stalled:
			state = "stalled: cannot apply what it holds; the primary resyncs it"
		case b.ApplyBlocked != "":
			state = b.ApplyBlocked
		case b.JournalFull:
			state = "journal full: refusing the primary's batches until its file system has room above the reserve"
		case b.AppliedSeq >= b.DurableSeq:
			state = "caught up"
		}
		fmt.Fprintf(tw, "durable\tseq %d\napplied\tseq %d (%d behind)\nstate\t%s\n", b.DurableSeq, b.AppliedSeq, b.DurableSeq-min(b.AppliedSeq, b.DurableSeq), state)
		return tw.Flush()
	}
	fmt.Fprintf(tw, "sealed\tseq %d\npending\t%s in %d files\n", st.LastSeq, human.Bytes(st.PendingBytes), st.Nodes)
	if st.BarrierP50 > 0 {
		fmt.Fprintf(tw, "barriers\tp50 %v, p95 %v, p99 %v (the last ones, up to 1024)\n", st.BarrierP50.Round(time.Microsecond),
			st.BarrierP95.Round(time.Microsecond), st.BarrierP99.Round(time.Microsecond))
	}
	if st.Acks != "" {
		fmt.Fprintf(tw, "acks\t%s\n", st.Acks)
	}
	if st.UncleanStart {
		fmt.Fprintf(tw, "started\tafter an unclean stop: backups are resynced from the volume\n")
	}
	if !st.Capture {
		fmt.Fprintf(tw, "capture\toff (--no-capture)\n")
	}
	tw.Flush()
	printBackupTable(w, st)
	printPluginTable(w, st)
	return nil
}

// printBackupTable writes a primary's backups, one row each.
func printBackupTable(w io.Writer, st control.Status) {
	if len(st.Backups) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "BACKUP\tDURABLE\tAPPLIED\tLAG\tLAG BYTES\tLAG AGE\tDEGRADED FOR\tSTATE")
		for _, b := range st.Backups {
			lagBytes := human.Bytes(b.LagBytes)
			if b.LagBytesAtLeast {
				lagBytes = "≥ " + lagBytes
			}
			degraded := "-"
			if b.DegradedFor > 0 {
				degraded = b.DegradedFor.Round(time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%v\t%s\t%s\n", b.Addr, b.AckedSeq, b.AppliedSeq, b.LagBatches, lagBytes,
				b.LagAge.Round(time.Millisecond), degraded, b.State)
		}
		tw.Flush()
	}
}

// printPluginTable writes the mount's plugins, one row each.
func printPluginTable(w io.Writer, st control.Status) {
	if len(st.Plugins) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PLUGIN\tSTATE\tPID\tRESTARTS\tLAST ERROR")
		for _, p := range st.Plugins {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", p.Name, p.State, p.Pid, p.Restarts, p.LastError)
		}
		tw.Flush()
	}
}
