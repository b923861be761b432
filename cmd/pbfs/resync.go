package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/human"
	"github.com/pbfs/pbfs/internal/status"
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
			// Each backup's count of finished resyncs before this one:
			// --wait waits for every one asked for to finish one more.
			before, err := cl.Status(c.Context)
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
			return waitResync(c, cl, resyncsBefore(before, c.StringSlice("backup")))
		},
	}
}

// resyncsBefore returns the finished-resync count of each backup a resync
// was asked for (names, or every backup).
func resyncsBefore(st control.Status, names []string) map[string]uint64 {
	out := map[string]uint64{}
	for _, b := range st.Backups {
		if len(names) == 0 || slices.Contains(names, b.Addr) {
			out[b.Addr] = b.Resyncs
		}
	}
	return out
}

// waitResync follows the resyncs through the mount's status until every
// backup is up with none under way, showing the bytes compared of every
// backup's resync together (a bar with rate and time left on a terminal,
// a line every few seconds otherwise), never going back: a resync that
// starts again (its attempt failed) is said in a line of its own.
func waitResync(c *cli.Context, cl *control.Client, asked map[string]uint64) error {
	p := newProgress(c.App.ErrWriter, "resync", "B", 0)
	defer p.finish()
	deadline := time.Now().Add(c.Duration("timeout"))
	seen := map[string]*status.ResyncProgress{} // each backup's resync, the latest seen
	for time.Now().Before(deadline) {
		st, err := cl.Status(c.Context)
		if err != nil {
			return cli.Exit("resync: "+err.Error(), 1)
		}
		busy, down := false, ""
		for _, b := range st.Backups {
			prev := seen[b.Addr]
			n, ok := asked[b.Addr]
			if ok && b.Resyncs <= n {
				busy = true // its resync has not finished yet (or started)
			}
			switch {
			case b.Resyncing && b.Resync != nil:
				busy = true
				if prev != nil && b.Resync.Elapsed < prev.Elapsed {
					fmt.Fprintf(c.App.ErrWriter, "resync of %s started again (the last attempt failed: pbfs status says why)\n", b.Addr)
				}
				seen[b.Addr] = b.Resync
			case b.Resyncing:
				busy = true
			case !b.Up || b.Stale:
				down = b.Addr + ": " + b.State
			case ok && b.Resyncs > n && b.LastResync != nil:
				seen[b.Addr] = b.LastResync // done, seen under way or not
			case prev != nil:
				prev.Bytes = prev.TotalBytes // done
			}
		}
		var done, total, sent uint64
		for _, r := range seen {
			done, total, sent = done+r.Bytes, total+r.TotalBytes, sent+r.SentBytes
		}
		p.setTotal(int64(total))
		p.set(max(p.done, int64(done)))
		if !busy && down == "" {
			p.finish()
			fmt.Fprintf(c.App.Writer, "every backup is resynced: %d of them, %s compared, %s sent, in %v\n", len(asked),
				human.Bytes(int64(total)), human.Bytes(int64(sent)), time.Since(p.start).Round(100*time.Millisecond))
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return cli.Exit("resync: not done after "+c.Duration("timeout").String(), 1)
}
