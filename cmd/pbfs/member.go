package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/coord"
)

// memberCommand changes who a running primary replicates to, and which
// nodes a cluster remembers.
func memberCommand() *cli.Command {
	journal := &cli.StringFlag{Name: "journal", Usage: "journal directory of the running primary (pbfs mount, promote or node)"}
	return &cli.Command{
		Name:  "member",
		Usage: "add or remove a backup of a running primary, or forget a cluster's lost node, without restarting the service",
		Subcommands: []*cli.Command{{
			Name:      "add",
			Usage:     "start replicating to one more backup; it joins the ack set once it has caught up (a resync, if it needs one)",
			ArgsUsage: "HOST:PORT",
			UsageText: "pbfs member add --journal /var/lib/pbfs/data b3:7700",
			Flags:     []cli.Flag{journal},
			Action: func(c *cli.Context) error {
				addr, err := memberArg(c, "add", "HOST:PORT")
				if err != nil {
					return err
				}
				return changeMember(c, "add", addr)
			},
		}, {
			Name:      "remove",
			Usage:     "stop replicating to a backup (--journal), or forget a lost node of a pbfs node cluster (--coordinator)",
			ArgsUsage: "HOST:PORT | NAME",
			UsageText: "pbfs member remove --journal /var/lib/pbfs/data b3:7700\npbfs member remove --coordinator etcd://e1:2379 n3",
			Flags: []cli.Flag{journal,
				&cli.StringFlag{Name: "coordinator", Usage: "the cluster's etcd: etcd://HOST:PORT[,HOST:PORT...]"},
				&cli.StringFlag{Name: "cluster", Value: "default", Usage: "the cluster's name"},
			},
			Action: func(c *cli.Context) error {
				if c.IsSet("coordinator") == c.IsSet("journal") {
					return cli.Exit("member remove: give --journal JDIR (a primary's backup) or --coordinator URL (a cluster's lost node)", 2)
				}
				if c.IsSet("coordinator") {
					return forgetNode(c)
				}
				addr, err := memberArg(c, "remove", "HOST:PORT")
				if err != nil {
					return err
				}
				return changeMember(c, "remove", addr)
			},
		}},
	}
}

// memberArg is the one argument a member command takes.
func memberArg(c *cli.Context, op, what string) (string, error) {
	if c.NArg() != 1 {
		return "", cli.Exit(fmt.Sprintf("member %s: give one %s (got %d arguments)", op, what, c.NArg()), 2)
	}
	if !c.IsSet("journal") {
		return "", cli.Exit(fmt.Sprintf("member %s: give --journal JDIR, the running primary's journal", op), 2)
	}
	return c.Args().First(), nil
}

// changeMember asks the primary serving --journal to add or remove addr.
func changeMember(c *cli.Context, op, addr string) error {
	cl, err := control.Dial(c.String("journal"))
	if err != nil {
		return cli.Exit("member "+op+": "+err.Error(), 1)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(c.Context, time.Minute)
	defer cancel()
	var ch control.MemberChange
	if op == "add" {
		ch, err = cl.AddBackup(ctx, addr)
	} else {
		ch, err = cl.RemoveBackup(ctx, addr)
	}
	if err != nil {
		return cli.Exit("member "+op+": "+strings.TrimPrefix(err.Error(), op+" backup "+addr+": "), 1)
	}
	w := c.App.Writer
	if op == "add" {
		fmt.Fprintf(w, "added %s: it joins the ack set once it has caught up (pbfs status --journal %s shows it)\n", addr, c.String("journal"))
	} else {
		fmt.Fprintf(w, "removed %s: nothing more is shipped to it\n", addr)
		if !ch.Told {
			fmt.Fprintf(w, "warning: %s was not reachable and could not be told it was removed: do not promote it, since it lacks what was acknowledged since; to use it again, add it back (it catches up or is resynced)\n", addr)
		}
	}
	fmt.Fprintf(w, "backups now: %s\n", orNone(strings.Join(ch.Backups, ", ")))
	fmt.Fprintln(w, "a restart replicates to the backups its flags or configuration name: change them to match")
	return nil
}

// forgetNode removes a lost node from a cluster's roster.
func forgetNode(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit(fmt.Sprintf("member remove: give one node NAME (got %d arguments)", c.NArg()), 2)
	}
	endpoints, err := coordinatorEndpoints(c.String("coordinator"))
	if err != nil {
		return cli.Exit("member remove: "+err.Error(), 2)
	}
	name := c.Args().First()
	if err := coord.Forget(c.Context, endpoints, c.String("cluster"), name); err != nil {
		if errors.Is(err, coord.ErrMemberLive) {
			return cli.Exit("member remove: "+err.Error()+" (pbfs status --coordinator lists it running)", 1)
		}
		return cli.Exit("member remove: "+err.Error(), 1)
	}
	fmt.Fprintf(c.App.Writer, "forgot %s: the cluster no longer counts it as lost; started again, it rejoins\n", name)
	return nil
}
