package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/control"
)

func barrierCommand() *cli.Command {
	return &cli.Command{
		Name:  "barrier",
		Usage: "seal everything written so far into the journal and print the seq that covers it",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "journal", Required: true, Usage: "journal directory of the running mount"},
			&cli.DurationFlag{Name: "timeout", Value: 60e9, Usage: "give up after this long", Action: positive("barrier", "timeout")},
		},
		Action: func(c *cli.Context) error {
			cl, err := control.Dial(c.String("journal"))
			if err != nil {
				return cli.Exit("barrier: "+err.Error(), 1)
			}
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			seq, err := cl.Barrier(ctx)
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			fmt.Fprintln(c.App.Writer, seq)
			return nil
		},
	}
}
