package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/coord"
	"github.com/pbfs/pbfs/mount"
	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/wire"
)

func nodeCommand() *cli.Command {
	flags := append(nodeMountFlags(), adoptFlag, timerSlackFlag, procsFlag, cpusFlag,
		&cli.StringFlag{Name: "coordinator", Required: true, Usage: "the etcd cluster that decides the roles: etcd://HOST:PORT[,HOST:PORT...]"},
		&cli.StringFlag{Name: "name", Required: true, Usage: "this node's name, unique in the cluster"},
		&cli.StringFlag{Name: "listen", Required: true, Usage: "address the backup role accepts the primary on (host:port)"},
		&cli.StringFlag{Name: "advertise", Usage: "address the others reach this node's backup at (default: --listen)"},
		&cli.StringFlag{Name: "cluster", Value: "default", Usage: "the cluster's name: its keys in etcd live under /pbfs/NAME"},
		&cli.DurationFlag{Name: "lease-ttl", Value: coord.DefaultTTL, Usage: "the primary's lease in etcd: a dead primary is replaced about this long after its last renewal"},
		&cli.StringFlag{Name: "on-promote", Usage: "shell command to run once this node serves as the primary (start the service)"},
		&cli.StringFlag{Name: "on-demote", Usage: "shell command to run before this node stops serving as the primary (stop the service)"},
		&cli.StringFlag{Name: "proxy-advertise", Usage: "where the other nodes reach this node's http-proxy (default: --advertise's host, the plugin's listen port)"},
	)
	return &cli.Command{
		Name:  "node",
		Usage: "run a node whose role (primary or backup) an etcd cluster decides, with automatic failover",
		Description: "Serves as a backup until the primary's lease lapses; then the most current eligible backup takes over\n" +
			"under a higher epoch, runs --on-promote, and replicates to the other members. docs/FAILOVER.md.",
		ArgsUsage: "VOLUME",
		Flags:     flags,
		Action:    runNode,
	}
}

// nodeConfig checks a node's flags before anything starts and returns
// its mount's configuration and the coordinator's endpoints.
func nodeConfig(c *cli.Context) (mount.Config, []string, error) {
	if c.NArg() != 1 {
		return mount.Config{}, nil, cli.Exit("node: want exactly one VOLUME argument", 2)
	}
	cfg, err := mountConfig(c)
	if err != nil {
		return cfg, nil, cli.Exit("node: "+err.Error(), 2)
	}
	if cfg.Token == "" {
		if cfg.Token, err = wire.LoadToken(c.String("token"), c.String("token-file")); err != nil {
			return cfg, nil, cli.Exit("node: "+err.Error(), 2)
		}
	}
	if len(cfg.Backups) > 0 {
		return cfg, nil, cli.Exit("node: --backup is not for a node: its backups are the members the coordinator lists", 2)
	}
	if !c.IsSet("min-backups") && cfg.Ack != "none" {
		// A node elected while every other member is down must not
		// acknowledge on its own disk: if it is lost too, a member
		// elected after it lacks what it acknowledged.
		cfg.MinBackups = 1
	}
	endpoints, err := coordinatorEndpoints(c.String("coordinator"))
	if err != nil {
		return cfg, nil, cli.Exit("node: "+err.Error(), 2)
	}
	for _, f := range []string{"listen", "advertise"} {
		if a := c.String(f); a != "" {
			if err := checkListen(a); err != nil {
				return cfg, nil, cli.Exit(fmt.Sprintf("node: --%s: %v", f, err), 2)
			}
		}
	}
	mount.ClearStaleMount(cfg.Mountpoint, cfg.Logger) // a killed primary's, before the checks
	check := cfg
	check.Dynamic = true
	if err := mount.Check(check); err != nil {
		return cfg, nil, cli.Exit("node: "+err.Error(), 2)
	}
	return cfg, endpoints, nil
}

// runNode runs a node until a signal (a second one stops it by force).
func runNode(c *cli.Context) error {
	cfg, endpoints, err := nodeConfig(c)
	if err != nil {
		return err
	}
	cpus, err := backupSchedule(c)
	if err != nil {
		return cli.Exit("node: "+err.Error(), 2)
	}
	adm, err := listenAdmin(c.String("admin"), adminToken(c), tlsFiles(c))
	if err != nil {
		return cli.Exit("node: "+err.Error(), 1)
	}
	defer adm.close()
	n, err := coord.Open(coord.Config{
		Endpoints: endpoints, Cluster: c.String("cluster"), Name: c.String("name"),
		Listen: c.String("listen"), Advertise: c.String("advertise"), TTL: c.Duration("lease-ttl"),
		Mount: cfg, OnPromote: c.String("on-promote"), OnDemote: c.String("on-demote"), Logger: cfg.Logger,
		Proxy: frontend(cfg), ProxyAdvertise: c.String("proxy-advertise"), BackupTimerSlack: c.Duration("timer-slack"), BackupProcs: c.Int("procs"), BackupCPUs: cpus,
		Backup: backup.Config{Token: cfg.Token, TLS: cfg.TLS, JournalReserve: cfg.JournalReserve, Registry: nil, Adopt: c.Bool("adopt")},
	})
	if err != nil {
		return cli.Exit("node: "+err.Error(), 2)
	}
	defer n.Close()
	surviveBrokenPipe()
	adm.serve(prometheus.GathererFunc(n.Gather), n.Health, n.Events(), cfg.Logger)
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		cfg.Logger.Info("signal received; stopping", "signal", s.String())
		cancel()
		if s = forceSignal(sig, time.Now(), cfg.Logger); s != nil {
			cfg.Logger.Warn("second signal: stopping by force", "signal", s.String())
			n.Abort()
		}
	}()
	return n.Run(ctx)
}

// nodeMountFlags are the mount's flags as a node takes them. --ack
// defaults to majority: a node's backups are the other members, and with
// all of them in the ack set one member lost stopped every
// acknowledgement until it was back. A majority (the primary and half of
// the backups, rounded up) keeps a cluster of three acknowledging with any
// one node lost, and an election then needs the reports of more than half
// of the backups, as Raft's does (docs/FAILOVER.md). --backup is hidden:
// it is refused, and a configuration file's mount section that lists
// backups is read without it.
func nodeMountFlags() []cli.Flag {
	flags := mountFlags()
	for i, f := range flags {
		switch f.Names()[0] {
		case "ack":
			nf := *f.(*cli.StringFlag)
			nf.Value = "majority"
			flags[i] = &nf
		case "backup":
			nf := *f.(*cli.StringSliceFlag)
			nf.Hidden = true
			flags[i] = &nf
		}
	}
	return flags
}

// coordinatorEndpoints reads etcd://HOST:PORT[,HOST:PORT...].
func coordinatorEndpoints(s string) ([]string, error) {
	rest, ok := strings.CutPrefix(s, "etcd://")
	if !ok || rest == "" {
		return nil, fmt.Errorf("coordinator %q: want etcd://HOST:PORT[,HOST:PORT...]", s)
	}
	var out []string
	for _, ep := range strings.Split(rest, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			if err := checkListen(ep); err != nil || strings.HasSuffix(ep, ":0") {
				return nil, fmt.Errorf("coordinator %q: endpoint %q: want HOST:PORT, the port from 1 to 65535", s, ep)
			}
			out = append(out, ep)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("coordinator %q: names no endpoint: want etcd://HOST:PORT[,HOST:PORT...]", s)
	}
	return out, nil
}

// frontend is the http-proxy plugin's listen address, if one is
// configured: a node forwards it to the primary while it is a backup.
func frontend(cfg mount.Config) string {
	for _, p := range cfg.Plugins {
		if p.Name == "http-proxy" {
			return p.Config["listen"]
		}
	}
	return ""
}
