package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/coord"
)

// electCommand is the operator's way out of an election that elects
// nobody (coord/force.go).
func electCommand() *cli.Command {
	return &cli.Command{
		Name:  "elect",
		Usage: "order a node of a cluster to take the vacant term although the election cannot prove it holds every acknowledged write (--force)",
		Description: "While no primary serves, every `pbfs node` elects only a backup that provably holds every acknowledged\n" +
			"batch, and otherwise elects nobody: too few members report (two of three machines lost), a stalled member\n" +
			"holds more than the others, or the members that report missed a term that may have acknowledged writes.\n" +
			"`pbfs status --coordinator` shows each member's reason. `pbfs elect --force NODE` records the decision to\n" +
			"accept what the missing members may hold as lost; NODE takes the next term at its next attempt, unless a\n" +
			"member that reports and could serve holds more (order that one). Refused (exit 1) while a primary serves and\n" +
			"for a node that cannot serve the volume: not up, stalled, a deposed primary awaiting its resync, one that never\n" +
			"received the volume, or one of another volume. Exit 0 once the order is recorded.",
		ArgsUsage: "NODE",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "coordinator", Required: true, Usage: "the cluster's etcd: etcd://HOST:PORT[,HOST:PORT...]"},
			&cli.StringFlag{Name: "cluster", Value: "default", Usage: "the cluster's name"},
			&cli.BoolFlag{Name: "force", Usage: "required: acknowledged writes the other members hold may be lost"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("elect: want exactly one NODE argument", 2)
			}
			if !c.Bool("force") {
				return cli.Exit("elect: an order against the election's rule may lose acknowledged writes: read `pbfs status --coordinator`, then give --force", 2)
			}
			endpoints, err := coordinatorEndpoints(c.String("coordinator"))
			if err != nil {
				return cli.Exit("elect: "+err.Error(), 2)
			}
			f, err := coord.Force(c.Context, endpoints, c.String("cluster"), c.Args().First())
			if err != nil {
				return cli.Exit("elect: "+err.Error(), 1)
			}
			w := c.App.Writer
			fmt.Fprintf(w, "ordered %s to take the term after epoch %d\n", f.Name, f.Ended)
			if f.Why != "" {
				fmt.Fprintf(w, "its election had refused: %s\n", f.Why)
			}
			fmt.Fprintln(w, "watch it with: pbfs status --coordinator", c.String("coordinator"))
			return nil
		},
	}
}
