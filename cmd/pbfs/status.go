package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/coord"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show a running primary or backup (--journal), or every node of a cluster (--coordinator): role, epoch, durable and applied seq, lag, state; a cluster that lacks a primary or lost a node exits 3",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "journal", Usage: "the journal directory of a running mount, backup or node"},
			&cli.StringFlag{Name: "coordinator", Usage: "the cluster's etcd: etcd://HOST:PORT[,HOST:PORT...]"},
			&cli.StringFlag{Name: "cluster", Value: "default", Usage: "the cluster's name"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON, for scripts"},
		},
		Action: runStatus,
	}
}

// runStatus is pbfs status: one node's (--journal, localStatus) or
// the cluster's (--coordinator).
func runStatus(c *cli.Context) error {
	switch {
	case c.IsSet("journal") == c.IsSet("coordinator"):
		return cli.Exit("status: give --journal JDIR (one node) or --coordinator URL (the cluster)", 2)
	case c.IsSet("journal"):
		return localStatus(c)
	}
	endpoints, err := coordinatorEndpoints(c.String("coordinator"))
	if err != nil {
		return cli.Exit("status: "+err.Error(), 2)
	}
	r, err := coord.Status(c.Context, endpoints, c.String("cluster"))
	if err != nil {
		return cli.Exit("status: "+err.Error(), 1)
	}
	w := c.App.Writer
	if c.Bool("json") {
		if err := printJSON(c, r); err != nil {
			return err
		}
		return degradedExit(r)
	}
	if err := printCluster(w, r); err != nil {
		return err
	}
	return degradedExit(r)
}

// printCluster writes a cluster's report for people: the primary, the
// last failover, a row per member and per lost node, and why the cluster
// is degraded.
func printCluster(w io.Writer, r *coord.Report) error {
	switch {
	case r.Leader != nil:
		fmt.Fprintf(w, "primary  %s (%s), epoch %d, lease %ds left of %v, since %s\n", r.Leader.Name, r.Leader.Addr, r.Leader.Epoch,
			r.LeaseTTL, r.Leader.TTL, r.Leader.Since.Local().Format(time.DateTime))
	default:
		fmt.Fprintf(w, "primary  none: an election is due or running (epoch %d)\n", r.Epoch)
		if f := r.Forced; f != nil && f.Ended == r.Epoch {
			fmt.Fprintf(w, "ordered  %s takes the next term, against the election's rule (pbfs elect --force, at %s)\n", f.Name, f.At.Local().Format(time.DateTime))
		}
	}
	if f := r.Failover; f != nil {
		forced := ""
		if f.Forced {
			forced = ", by an operator's order (pbfs elect --force)"
		}
		outage := ""
		if f.Outage > 0 {
			outage = fmt.Sprintf("; clients waited %v, from the old primary's last lease renewal to the first write acknowledged", f.Outage.Round(time.Millisecond))
		}
		fmt.Fprintf(w, "failover %s -> %s at %s, epoch %d, took %v to serve%s%s\n", orNone(f.From), f.To, f.At.Local().Format(time.DateTime), f.Epoch, f.Took.Round(time.Millisecond), outage, forced)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nNAME\tROLE\tADDR\tEPOCH\tDURABLE\tAPPLIED\tLAG\tSTATE\tREPORTED")
	for _, m := range r.Members {
		state := memberState(r, m)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s ago\n", m.Name, m.Role, m.Addr, m.Epoch, m.Durable, m.Applied, r.Lag(m), state,
			time.Since(m.At).Round(time.Millisecond))
	}
	for _, l := range r.Lost {
		fmt.Fprintf(tw, "%s\tlost\t%s\t-\t-\t-\t-\tgone for %v (was %s)\t%s ago\n", l.Name, l.Addr, l.For.Round(time.Second), l.Role,
			l.For.Round(time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range r.Members {
		if r.Leader == nil && m.Refused != "" {
			fmt.Fprintf(w, "\n%s does not take over: %s\n", m.Name, m.Refused)
		}
	}
	if len(r.Degraded) > 0 {
		fmt.Fprintf(w, "\ncluster  degraded: %s\n", strings.Join(r.Degraded, "; "))
		if len(r.Lost) > 0 {
			fmt.Fprintln(w, "         a lost node rejoins when started again; `pbfs member remove --coordinator URL NAME` forgets one that will not")
		}
	}
	return nil
}

// degradedExit is status's exit for a cluster report: 3 when the cluster
// is degraded (no primary, a node lost, a member stalled), as a monitor
// reads it; 0 when whole.
func degradedExit(r *coord.Report) error {
	if len(r.Degraded) > 0 {
		return cli.Exit("", 3)
	}
	return nil
}

// memberState is a member's STATE column: whether it needs a resync and,
// while no primary serves, whether its report counts in the election (a
// backup's counts once it has fenced the ended term).
func memberState(r *coord.Report, m coord.Member) string {
	state := "ok"
	if m.Stalled {
		state = "stalled: needs a resync"
	}
	if r.Leader == nil && m.Role == "backup" && r.Epoch > 0 {
		if m.Fenced >= r.Epoch {
			state += ", fenced epoch " + strconv.FormatUint(r.Epoch, 10)
		} else {
			state += ", not fenced yet: its report does not count"
		}
	}
	return state
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
