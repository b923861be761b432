package main

import (
	"context"
	"fmt"
	"net/http"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/events"
)

// eventsCommand follows a process's state changes as JSON lines.
func eventsCommand() *cli.Command {
	return &cli.Command{
		Name:  "events",
		Usage: "follow a running mount's, backup's or node's state changes (role, backups up and down, resyncs, fences, degradations) as JSON lines",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "journal", Usage: "journal directory of a running mount or backup (its control socket)"},
			&cli.StringFlag{Name: "admin", Usage: "the admin address (HOST:PORT) of a mount, backup or node (a node keeps its events across roles)"},
			&cli.BoolFlag{Name: "no-history", Usage: "only changes from now on, not the recent ones first"},
			tokenFlag, tokenFileFlag,
		},
		Action: func(c *cli.Context) error {
			if c.IsSet("journal") == c.IsSet("admin") {
				return cli.Exit("events: give --journal JDIR (a mount or backup) or --admin HOST:PORT (any of them, a node too)", 2)
			}
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			w := c.App.Writer
			print := func(line []byte) error {
				_, err := fmt.Fprintf(w, "%s\n", line)
				return err
			}
			var err error
			if c.IsSet("journal") {
				err = journalEvents(ctx, c.String("journal"), !c.Bool("no-history"), print)
			} else {
				err = adminEvents(ctx, c, print)
			}
			if err != nil && ctx.Err() == nil {
				return cli.Exit("events: "+err.Error(), 1)
			}
			return nil
		},
	}
}

func journalEvents(ctx context.Context, jdir string, past bool, fn func([]byte) error) error {
	cl, err := control.Dial(jdir)
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.Events(ctx, past, fn)
}

// adminEvents follows /events of an admin listener (plain HTTP), with the
// token when one is given (an admin address off loopback needs it).
func adminEvents(ctx context.Context, c *cli.Context, fn func([]byte) error) error {
	url := "http://" + c.String("admin") + "/events"
	if c.Bool("no-history") {
		url += "?past=0"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token := adminToken(c); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	err = events.Follow(resp.Body, fn)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%s: the stream ended (the process stopped?)", url)
}
