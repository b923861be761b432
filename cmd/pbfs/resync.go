package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/control"
)

func resyncCommand() *cli.Command {
	return &cli.Command{
		Name:  "resync",
		Usage: "make the running mount resync every backup now (block checksums find what differs; the mount logs progress)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "journal", Required: true, Usage: "journal directory of the running mount"},
		},
		Action: func(c *cli.Context) error {
			cl, err := control.Dial(c.String("journal"))
			if err != nil {
				return cli.Exit("resync: "+err.Error(), 1)
			}
			if err := cl.Resync(context.Background()); err != nil {
				return cli.Exit(err.Error(), 1)
			}
			fmt.Fprintln(c.App.Writer, "resync started; pbfs status on the control socket shows the backups")
			return nil
		},
	}
}
