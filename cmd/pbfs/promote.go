package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/mount"
	"github.com/pbfs/pbfs/replica"
	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/wire"
)

func promoteCommand() *cli.Command {
	flags := append(mountFlags(),
		&cli.StringSliceFlag{Name: "peer", Usage: "another backup of the old primary to compare with (repeatable; default: the --backup addresses)"},
		&cli.BoolFlag{Name: "force", Usage: "promote even when acknowledged writes could be lost (recorded in the journal)"},
	)
	return &cli.Command{
		Name:  "promote",
		Usage: "turn this backup (stopped) into the primary: apply what its journal holds, take a higher epoch, mount VOLUME and replicate to the --backup addresses",
		Description: "Refuses, naming the reason, when this backup is stalled, is behind a reachable peer, or cannot prove it holds\n" +
			"every acknowledged batch (too few peers answered for the old primary's ack policy). --force overrides, loudly.",
		ArgsUsage: "VOLUME",
		Flags:     flags,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("promote: want exactly one VOLUME argument", 2)
			}
			if !journal.Exists(c.String("journal")) {
				return cli.Exit(fmt.Sprintf("promote: --journal %s holds no journal: promote takes the journal of a backup (pbfs backup --journal)", c.String("journal")), 2)
			}
			cfg, err := mountConfig(c)
			if err != nil {
				return cli.Exit("promote: "+err.Error(), 2)
			}
			peers := c.StringSlice("peer")
			if !c.IsSet("peer") {
				peers = cfg.Backups
			}
			if len(peers) > 0 && cfg.Token == "" {
				if cfg.Token, err = wire.LoadToken(c.String("token"), c.String("token-file")); err != nil {
					return cli.Exit("promote: "+err.Error(), 2)
				}
			}
			cfg, p, err := replica.Promote(c.Context, cfg, backup.PromoteConfig{Peers: peers, Token: cfg.Token, TLS: cfg.TLS, Force: c.Bool("force")})
			switch {
			case errors.Is(err, backup.ErrNotPromotable) && !errors.Is(err, backup.ErrPrimaryJournal):
				return cli.Exit(err.Error()+" (--force overrides)", 1)
			case err != nil:
				// --force does not make a primary's journal a backup's.
				code := 1
				if _, usage := errors.AsType[*mount.ConfigError](err); usage {
					code = 2
				}
				return cli.Exit(err.Error(), code)
			}
			if p.Forced {
				fmt.Fprintf(c.App.ErrWriter, "promote: FORCED: %v\n", p.Reasons)
			}
			return serveMount(c, cfg, "promote")
		},
	}
}
