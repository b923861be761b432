package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/dockervol"
	"github.com/pbfs/pbfs/internal/sdnotify"
)

// defaultDriverSocket is where Docker and Podman look for the driver
// named pbfs.
const defaultDriverSocket = "/run/docker/plugins/pbfs.sock"

func volumeDriverCommand() *cli.Command {
	return &cli.Command{
		Name:  "volume-driver",
		Usage: "serve replicated volumes to Docker or Podman: docker volume create --driver pbfs --opt backups=b1:7700 NAME",
		Description: "Each volume is a pbfs mount with its own journal, started when its first container starts and, after a barrier, " +
			"stopped when its last one stops. Volume options (--opt KEY=VALUE): backups (HOST:PORT,HOST:PORT or none), ack, ack-level, " +
			"fsync, min-backups, degrade-after, retain, retain-max, write-diff, no-xattrs, token-file, tls-cert, tls-key, tls-ca, " +
			"plugin, plugin-config; --defaults gives their defaults. The mounts outlive the driver: a restarted driver adopts them " +
			"(docs/CONTAINERS.md).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "state-dir", Value: "/var/lib/pbfs/volumes", Usage: "directory holding each volume's files, journal and record"},
			&cli.StringFlag{Name: "socket", Value: defaultDriverSocket, Usage: "the plugin socket; its name, NAME.sock, is the driver's name to the engine"},
			&cli.StringFlag{Name: "defaults", Usage: "a YAML file of volume options every volume starts from (etc/volume-driver.yaml)"},
			&cli.DurationFlag{Name: "barrier-timeout", Value: 30e9, Usage: "how long the last unmount of a volume waits for its barrier", Action: positive("volume-driver", "barrier-timeout")},
		},
		Action: runVolumeDriver,
	}
}

func runVolumeDriver(c *cli.Context) error {
	if c.NArg() != 0 {
		return cli.Exit("volume-driver: takes no arguments", 2)
	}
	log := logger(c)
	surviveBrokenPipe()
	var defaults dockervol.Options
	if f := c.String("defaults"); f != "" {
		var err error
		if defaults, err = dockervol.LoadDefaults(f); err != nil {
			return cli.Exit("volume-driver: "+err.Error(), 2)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return cli.Exit("volume-driver: find the pbfs binary: "+err.Error(), 1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	d, err := dockervol.New(dockervol.Config{
		StateDir: c.String("state-dir"), Exe: exe, Defaults: defaults, LogLevel: c.String("log-level"),
		BarrierTimeout: c.Duration("barrier-timeout"), Logger: log,
	})
	if err != nil {
		return cli.Exit("volume-driver: "+err.Error(), 1)
	}
	ln, err := dockervol.Listen(c.String("socket"))
	if err != nil {
		code := 1
		if errors.Is(err, dockervol.ErrSocketInUse) {
			code = 2
		}
		return cli.Exit("volume-driver: "+err.Error(), code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		s := <-sig
		log.Info("signal received; stopping the driver (the volumes stay mounted for the next one)", "signal", s.String())
		cancel()
	}()
	log.Info("volume driver serving", "socket", c.String("socket"), "state_dir", c.String("state-dir"), "volumes", len(d.Names()))
	notifySystemd(sdnotify.Ready, log)
	err = dockervol.Serve(ctx, ln, d)
	notifySystemd(sdnotify.Stopping, log)
	if err != nil {
		return cli.Exit("volume-driver: "+err.Error(), 1)
	}
	return nil
}
