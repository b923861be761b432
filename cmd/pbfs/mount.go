package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/internal/sdnotify"
	"github.com/pbfs/pbfs/mount"
	"github.com/pbfs/pbfs/plugins/sdk/host"
	"github.com/pbfs/pbfs/replicate/wire"
)

func mountCommand() *cli.Command {
	return &cli.Command{
		Name:      "mount",
		Usage:     "mount pbfs over VOLUME (or --backing SRC at MOUNTPOINT) and capture every change into the journal",
		ArgsUsage: "VOLUME | --backing SRC MOUNTPOINT",
		Flags:     mountFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("mount: want exactly one VOLUME or MOUNTPOINT argument", 2)
			}
			cfg, err := mountConfig(c)
			if err != nil {
				return cli.Exit("mount: "+err.Error(), 2)
			}
			return serveMount(c, cfg, "mount")
		},
	}
}

// mountFlags are the flags of every command that runs a primary.
func mountFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "journal", Required: true, Usage: "journal directory (outside the volume)"},
		&cli.StringFlag{Name: "backing", Usage: "directory holding the volume's data, when it is not the mountpoint itself"},
		&cli.BoolFlag{Name: "allow-other", Usage: "let other users (a container's) use the mount"},
		&cli.BoolFlag{Name: "no-capture", Usage: "pass through without recording (for measuring capture's cost)"},
		&cli.BoolFlag{Name: "write-diff", Usage: "record only the bytes a write changes (costs a read per write)"},
		&cli.BoolFlag{Name: "no-xattrs", Usage: "answer extended-attribute calls with ENOSYS (saves a trip per write)"},
		&cli.Int64Flag{Name: "batch-bytes", Value: 64 << 20, Usage: "seal the open batch once it holds this many bytes (a size: 65536, 64M, 1GiB)"},
		&cli.DurationFlag{Name: "seal-interval", Value: 50e6, Usage: "seal the open batch at most this long after its first change (an idle mount seals nothing)"},
		journalReserveFlag,
		&cli.StringSliceFlag{Name: "backup", Usage: "HOST:PORT of a pbfs backup to replicate to (repeatable)"},
		&cli.StringFlag{Name: "ack", Value: "all", Usage: "backups that must hold a batch before its barrier returns: all, majority, none or a number"},
		&cli.StringFlag{Name: "ack-level", Value: "disk", Usage: "what a backup's ack means: disk (durable in its journal) or memory (received and checksummed; survives one machine's crash, not a power loss of all of them)"},
		&cli.DurationFlag{Name: "retain", Usage: "trim batches every backup holds once they are this old (default with backups: 10m; 0 keeps everything)"},
		&cli.DurationFlag{Name: "retain-max", Usage: "trim any batch this old, acked or not (default with backups: 24h; 0 sets no age limit)"},
		&cli.Uint64Flag{Name: "epoch", Usage: "start a new term: raise the journal's epoch to this before shipping (backups then refuse older primaries)"},
		&cli.DurationFlag{Name: "degrade-after", Usage: "drop a backup that has been behind this long from the ack set, marking it stale (default: barriers wait for it)"},
		&cli.IntFlag{Name: "min-backups", Usage: "at least this many backups must hold a batch before its barrier returns, however few are up (default: 0 for mount, 1 for node)"},
		tokenFlag, tokenFileFlag, tlsFlags[0], tlsFlags[1], tlsFlags[2], pluginFlags[0], pluginFlags[1],
		hintFlags[0], hintFlags[1], hintFlags[2], hintFlags[3], adminFlag, monitorSlackFlag,
	}
}

// monitorSlackFlag: see internal/timerslack's KeepMonitor.
var monitorSlackFlag = &cli.DurationFlag{Name: "monitor-slack", Value: time.Millisecond, EnvVars: []string{"PBFS_MONITOR_SLACK"},
	Usage: "how late the kernel may wake the Go runtime's monitor thread, which polls every 20µs while a FUSE request is being served: a quarter less of the mount's CPU per request under WordPress; a thread blocked in a system call may then hold its P that much longer before another takes it. 0 keeps the kernel's default (50µs). Needs CAP_SYS_NICE"}

// mountConfig reads mountFlags; an error is a usage error.
func mountConfig(c *cli.Context) (mount.Config, error) {
	plugins, err := host.ParseSpecs(c.StringSlice("plugin"), c.StringSlice("plugin-config"))
	if err != nil {
		return mount.Config{}, err
	}
	rules, fsync, err := hintConfig(c)
	if err != nil {
		return mount.Config{}, err
	}
	if err := checkAdmin(c.String("admin"), adminToken(c)); err != nil {
		return mount.Config{}, err
	}
	if c.Duration("monitor-slack") < 0 {
		return mount.Config{}, errors.New("--monitor-slack must be 0 (the kernel's default) or positive")
	}
	if e := c.Uint64("epoch"); e >= wire.MaxEpoch {
		return mount.Config{}, fmt.Errorf("--epoch %d: want below %d, so that a promotion can start a term after it", e, uint64(wire.MaxEpoch))
	}
	var token string
	if len(c.StringSlice("backup")) > 0 {
		if token, err = wire.LoadToken(c.String("token"), c.String("token-file")); err != nil {
			return mount.Config{}, err
		}
	}
	// An explicit 0 keeps everything (the help says so); unset means the
	// default.
	retain, retainMax := c.Duration("retain"), c.Duration("retain-max")
	if c.IsSet("retain") && retain == 0 {
		retain = -1
	}
	if c.IsSet("retain-max") && retainMax == 0 {
		retainMax = -1
	}
	return mount.Config{
		Backups: c.StringSlice("backup"), Ack: c.String("ack"), Token: token, DegradeAfter: c.Duration("degrade-after"), MinBackups: c.Int("min-backups"),
		Retain: retain, RetainMax: retainMax, TLS: tlsFiles(c), Epoch: c.Uint64("epoch"),
		Mountpoint: c.Args().First(), Backing: c.String("backing"), Journal: c.String("journal"),
		AllowOther: c.Bool("allow-other"), NoCapture: c.Bool("no-capture"), WriteDiff: c.Bool("write-diff"),
		NoXattrs: c.Bool("no-xattrs"), MaxBatchBytes: c.Int64("batch-bytes"), SealInterval: c.Duration("seal-interval"),
		JournalReserve: c.Int64("journal-reserve"),
		Logger:         logger(c), Plugins: plugins, PluginLogLevel: c.String("log-level"),
		Rules: rules, Fsync: fsync, TrustVolume: c.Bool("trust-volume"), AckLevel: c.String("ack-level"),
		MonitorSlack: c.Duration("monitor-slack"),
	}, nil
}

// serveMount starts the primary and serves until a signal (a second one
// stops by force: the service's open files on the volume fail from then
// on, and the journal stays marked open, so the next start resyncs the
// backups) or until it is unmounted from outside; either way it seals and
// ships what the mount took, and exits 0.
func serveMount(c *cli.Context, cfg mount.Config, cmd string) error {
	log := cfg.Logger
	surviveBrokenPipe()
	// Caught from before the mount answers: a signal the moment it does
	// must stop it cleanly, not kill it.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	helper := helperPipe()
	if c.String("admin") != "" {
		// A pbfs of this volume still stopping may hold the address.
		mount.AwaitVolume(cfg)
	}
	adm, err := listenAdmin(c.String("admin"), adminToken(c), tlsFiles(c))
	if err != nil {
		return cli.Exit(cmd+": "+err.Error(), 1)
	}
	defer adm.close()
	cfg.BeforeUnlock = adm.close
	m, err := mount.Start(cfg)
	if err == nil {
		adm.serve(m.Registry(), m.Health, m.Events(), log)
	}
	if err != nil {
		if errors.Is(err, mount.ErrJournalInVolume) {
			return cli.Exit(cmd+": "+err.Error()+": put the journal outside the volume", 2)
		}
		if _, usage := errors.AsType[*mount.ConfigError](err); usage {
			return cli.Exit(cmd+": "+err.Error(), 2)
		}
		return cli.Exit(cmd+": "+err.Error(), 1)
	}
	notifySystemd(sdnotify.Ready, log)
	tellHelper(helper, log)
	select {
	case s := <-sig:
		log.Info("signal received; unmounting", "signal", s.String())
	case <-m.Done():
		log.Info("unmounted from outside; sealing and shipping what the mount took, then exiting")
	}
	stopping := time.Now() // a signal soon after is the same request
	notifySystemd(sdnotify.Stopping, log)
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	force := make(chan os.Signal, 1)
	go func() { force <- forceSignal(sig, stopping, log) }()
	var cerr error
	select {
	case cerr = <-closed:
	case s := <-force:
		if s != nil {
			log.Warn("second signal: stopping by force", "signal", s.String())
			m.Abort()
		}
		cerr = <-closed
	}
	if cerr != nil {
		return cli.Exit("unmount: "+cerr.Error(), 1)
	}
	return nil
}
