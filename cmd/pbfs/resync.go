package main

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/control"
)

func resyncCommand() *cli.Command {
	return &cli.Command{
		Name:  "resync",
		Usage: "make the running mount resync every backup, or the ones named, now (block checksums find what differs)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "journal", Required: true, Usage: "journal directory of the running mount"},
			&cli.StringSliceFlag{Name: "backup", Usage: "resync only the backup at this address (as pbfs status names it; repeatable)"},
			&cli.BoolFlag{Name: "wait", Usage: "wait until every backup is resynced and up, showing progress"},
			&cli.DurationFlag{Name: "timeout", Value: time.Hour, Usage: "with --wait: give up after this long", Action: positive("resync", "timeout")},
		},
		Action: func(c *cli.Context) error {
			cl, err := control.Dial(c.String("journal"))
			if err != nil {
				return cli.Exit("resync: "+err.Error(), 1)
			}
			if err := cl.Resync(context.Background(), c.StringSlice("backup")...); err != nil {
				return cli.Exit(err.Error(), 1) // "resync: ..."
			}
			if !c.Bool("wait") {
				fmt.Fprintf(c.App.Writer, "resync started; pbfs status --journal %s shows how far each backup is\n", c.String("journal"))
				return nil
			}
			return waitResync(c, cl)
		},
	}
}

// waitResync follows the resyncs through the mount's status until every
// backup is up with none under way.
func waitResync(c *cli.Context, cl *control.Client) error {
	p := newProgress(c.App.ErrWriter, "resync", "%", 100)
	defer p.finish()
	deadline := time.Now().Add(c.Duration("timeout"))
	started := false
	for time.Now().Before(deadline) {
		st, err := cl.Status(c.Context)
		if err != nil {
			return cli.Exit("resync: "+err.Error(), 1)
		}
		pct, busy, down := 100.0, false, ""
		for _, b := range st.Backups {
			if b.Resyncing {
				busy, started = true, true
				pct = min(pct, b.ResyncPercent)
			} else if !b.Up || b.Stale {
				down = b.Addr + ": " + b.State
			}
		}
		p.set(int64(pct))
		if !busy && down == "" && started {
			p.finish()
			fmt.Fprintln(c.App.Writer, "every backup is resynced")
			return nil
		}
		if !busy && down == "" && time.Since(p.start) > 2*time.Second {
			started = true // a resync quicker than a poll
		}
		time.Sleep(200 * time.Millisecond)
	}
	return cli.Exit("resync: not done after "+c.Duration("timeout").String(), 1)
}
