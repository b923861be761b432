package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/pathcheck"
	"github.com/pbfs/pbfs/internal/procs"
	"github.com/pbfs/pbfs/internal/sdnotify"
	"github.com/pbfs/pbfs/internal/timerslack"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/mount"
	"github.com/pbfs/pbfs/replica"
	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/wire"
)

// scheduleAsBackup sets how the process is scheduled while it is a
// backup: the CPUs it runs on when asked (internal/procs.Pin), its timer
// slack (internal/timerslack; without the privilege it costs CPU, nothing
// else) and its Go procs (internal/procs), and says so.
func scheduleAsBackup(cpus unix.CPUSet, slack time.Duration, nprocs int, log *slog.Logger) {
	pinned := "any"
	if cpus.Count() > 0 {
		if err := procs.Pin(cpus); err != nil {
			log.Warn("CPU affinity not set", "err", err)
		} else {
			pinned = procs.FormatCPUs(cpus)
		}
	}
	if slack > 0 {
		if err := timerslack.Set(slack); err != nil {
			log.Info("timer slack left at the kernel's default", "err", err)
			slack = 0
		}
	}
	log.Info("scheduled as a backup", "procs", procs.Set(nprocs), "timer_slack", slack, "cpus", pinned)
}

// maxProcs and maxTimerSlack bound --procs and --timer-slack: Go stops a
// process that runs more than 10,000 threads, and timers that fire later
// than a few milliseconds hold up a backup's apply windows (20 ms), its
// heartbeats and its own shutdown.
const (
	maxProcs      = 256
	maxTimerSlack = 10 * time.Millisecond
)

// backupSchedule checks --procs and --timer-slack and returns the CPUs
// --cpus names (none: any).
func backupSchedule(c *cli.Context) (unix.CPUSet, error) {
	if n := c.Int("procs"); n < 0 || n > maxProcs {
		return unix.CPUSet{}, fmt.Errorf("--procs %d: want 0 (one per CPU) to %d", n, maxProcs)
	}
	if d := c.Duration("timer-slack"); d < 0 || d > maxTimerSlack {
		return unix.CPUSet{}, fmt.Errorf("--timer-slack %v: want 0 (the kernel's default) to %v", d, maxTimerSlack)
	}
	if c.String("cpus") == "" {
		return unix.CPUSet{}, nil
	}
	cpus, err := procs.ParseCPUs(c.String("cpus"))
	if err == nil {
		err = procs.Usable(cpus)
	}
	if err != nil {
		return cpus, fmt.Errorf("--cpus %s: %w", c.String("cpus"), err)
	}
	return cpus, nil
}

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:      "backup",
		Usage:     "receive a primary's batches, make them durable, ack them and apply them to VOLUME",
		ArgsUsage: "VOLUME",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Required: true, Usage: "address to accept the primary on (host:port)"},
			&cli.StringFlag{Name: "journal", Required: true, Usage: "the backup's own journal directory (outside VOLUME)"},
			&cli.StringFlag{Name: "metrics-listen", Usage: "serve Prometheus metrics (pbfs_backup_*, pbfs_journal_*) over HTTP at this address (host:port), at /metrics"},
			&cli.DurationFlag{Name: "retain", Value: 10 * time.Minute, Usage: "trim applied batches from the backup's journal once they are this old (0 keeps everything, as on a mount)"},
			&cli.Uint64Flag{Name: "accept-epoch", Usage: "admit a primary of this epoch however far above the backup's it is (otherwise a primary may raise it by at most 65536: docs/FAILOVER.md)"},
			&cli.Uint64Flag{Name: "repair-epoch", Usage: "if the journal holds an epoch no term can take (2^63 or above, stored from a Hello by an earlier version), replace it with this one, the current primary's epoch"},
			journalReserveFlag, tokenFlag, tokenFileFlag, tlsFlags[0], tlsFlags[1], tlsFlags[2], adminFlag, adoptFlag, timerSlackFlag, procsFlag, cpusFlag,
		},
		Action: runBackup,
	}
}

// checkBackupFlags refuses, with exit status 2, flags no backup can run
// with, before anything is opened; it returns the replication token.
func checkBackupFlags(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", cli.Exit("backup: want exactly one VOLUME argument", 2)
	}
	token, err := wire.LoadToken(c.String("token"), c.String("token-file"))
	if err != nil {
		return "", cli.Exit("backup: "+err.Error(), 2)
	}
	for _, f := range []string{"listen", "metrics-listen"} {
		if c.IsSet(f) && c.String(f) == "" {
			return "", cli.Exit(fmt.Sprintf("backup: --%s is empty: give an address, such as 127.0.0.1:7700", f), 2)
		}
		if a := c.String(f); a != "" {
			if err := checkListen(a); err != nil {
				return "", cli.Exit(fmt.Sprintf("backup: --%s: %v", f, err), 2)
			}
		}
	}
	if err := journal.CheckReserve(c.String("journal"), c.Int64("journal-reserve")); err != nil {
		return "", cli.Exit("backup: "+err.Error(), 2)
	}
	if err := checkAdmin(c.String("admin"), token); err != nil {
		return "", cli.Exit("backup: "+err.Error(), 2)
	}
	for _, f := range []string{"accept-epoch", "repair-epoch"} {
		if e := c.Uint64(f); e >= wire.MaxEpoch {
			return "", cli.Exit(fmt.Sprintf("backup: --%s %d: want below %d", f, e, uint64(wire.MaxEpoch)), 2)
		}
	}
	if err := tlsFiles(c).Check(); err != nil {
		return "", cli.Exit("backup: "+err.Error(), 2)
	}
	return token, nil
}

// runBackup serves a backup until a signal, or until serving fails.
func runBackup(c *cli.Context) error {
	token, err := checkBackupFlags(c)
	if err != nil {
		return err
	}
	surviveBrokenPipe()
	// A primary killed on this volume (an old primary rejoining)
	// left its dead FUSE mount on it.
	mount.ClearStaleMount(c.Args().First(), logger(c))
	if fi, err := os.Stat(c.Args().First()); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return cli.Exit(fmt.Sprintf("backup: VOLUME %s: %v", c.Args().First(), err), 2)
	}
	cpus, err := backupSchedule(c)
	if err != nil {
		return cli.Exit("backup: "+err.Error(), 2)
	}
	adm, err := listenAdmin(c.String("admin"), token, tlsFiles(c))
	if err != nil {
		return cli.Exit("backup: "+err.Error(), 1)
	}
	defer adm.close()
	log := logger(c)
	scheduleAsBackup(cpus, c.Duration("timer-slack"), c.Int("procs"), log)
	// Caught from before the backup listens (see serveMount).
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	// Bound before the journal is opened: a port in use must not leave
	// a new journal behind.
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return cli.Exit("backup: "+err.Error(), 1)
	}
	defer ln.Close()
	r, err := replica.Start(replica.Config{Listener: ln, Logger: log, Backup: backup.Config{Volume: c.Args().First(),
		Journal: c.String("journal"), Token: token, Logger: log, Retain: backupRetain(c.Duration("retain")),
		TLS: tlsFiles(c), JournalReserve: c.Int64("journal-reserve"), Adopt: c.Bool("adopt"),
		AcceptEpoch: c.Uint64("accept-epoch"), RepairEpoch: c.Uint64("repair-epoch")}})
	if errors.Is(err, pathcheck.ErrInside) {
		return cli.Exit("backup: "+err.Error()+": put the journal outside the volume", 2)
	}
	if err != nil {
		return cli.Exit("backup: "+err.Error(), 1)
	}
	defer r.Close()
	adm.serve(r.Registry(), r.Health, r.Events(), log)
	if addr := c.String("metrics-listen"); addr != "" {
		stop, err := serveMetrics(addr, r.Registry(), log)
		if err != nil {
			return cli.Exit("backup: "+err.Error(), 1)
		}
		defer stop()
	}
	notifySystemd(sdnotify.Ready, log) // it listens since before the journal opened
	var serr error
	select {
	case s := <-sig:
		log.Info("signal received; stopping", "signal", s.String())
	case serr = <-r.Served():
		log.Error("serving stopped", "err", serr)
	}
	notifySystemd(sdnotify.Stopping, log)
	cerr := r.Close()
	st := r.Backup().Status() // read once it closed: its streams store until then
	if cerr != nil {
		return cli.Exit("backup: "+cerr.Error(), 1)
	}
	log.Info("backup stopped", "durable_seq", st.DurableSeq, "applied_seq", st.AppliedSeq)
	if serr != nil {
		return cli.Exit("backup: serving stopped: "+serr.Error(), 1)
	}
	return nil
}

var (
	tlsFlags = []cli.Flag{
		&cli.StringFlag{Name: "tls-cert", Usage: "this node's TLS certificate (PEM), for mutual TLS between primary and backups"},
		&cli.StringFlag{Name: "tls-key", Usage: "this node's TLS key (PEM)"},
		&cli.StringFlag{Name: "tls-ca", Usage: "CA certificate (PEM) that signs the other side's certificate"},
	}
	tokenFlag     = &cli.StringFlag{Name: "token", Usage: "shared replication secret (prefer --token-file or PBFS_TOKEN, which stay out of ps)"}
	tokenFileFlag = &cli.StringFlag{Name: "token-file", Usage: "file holding the shared replication secret"}
	// adoptFlag: the first resync makes VOLUME a copy of the primary's and
	// removes the rest, so a VOLUME that already holds files is taken only
	// when asked (replicate/backup/adopt.go).
	adoptFlag = &cli.BoolFlag{Name: "adopt", Usage: "let the first resync take a VOLUME that already holds files (a copy of the primary's, to shorten it): it becomes a copy of the primary's volume, and what the primary lacks is removed; without it that resync is refused"}
	// timerSlackFlag: see internal/timerslack.
	timerSlackFlag = &cli.DurationFlag{Name: "timer-slack", Value: time.Millisecond, Usage: "how late the kernel may fire this process's timers while it is a backup: Go's scheduler then wakes less often for each batch, which saves a third of a backup's CPU under small batches; 0 keeps the kernel's default (50µs); at most 10ms. Needs CAP_SYS_NICE"}
	// cpusFlag: see internal/procs (affinity.go).
	cpusFlag = &cli.StringFlag{Name: "cpus", Usage: "the only CPUs this process runs on while it is a backup, as taskset writes them (1, 0,2 or 2-3): on a virtual machine one CPU keeps a batch's thread wake-ups off the costly path between vCPUs, which saved 12-31 % of a backup's CPU per small batch on a 2-vCPU test machine; empty (the default) leaves it to the kernel. Pin it to a CPU no busy process shares"}
	// procsFlag: see internal/procs.
	procsFlag = &cli.IntFlag{Name: "procs", Value: 1, Usage: "how many threads may run this process's Go code at once while it is a backup (GOMAXPROCS): one saves a fifth of a backup's CPU per small batch, at the same latency and throughput; 0 gives Go's default, one per CPU; at most 256. A GOMAXPROCS environment variable wins"}
	// journalReserveFlag: Badger dies of SIGBUS when its disk fills, so the
	// journal keeps this much free (journal/space.go).
	journalReserveFlag = &cli.Int64Flag{Name: "journal-reserve", Usage: "bytes to keep free on the journal's file system: journal appends (and, on a mount, the service's writes) that would cut into it fail with ENOSPC (a size: 8M, 256MiB; default: a quarter of the file system, between 48 and 256 MiB)"}
)

func tlsFiles(c *cli.Context) wire.TLSFiles {
	return wire.TLSFiles{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-ca")}
}

// backupRetain maps --retain to the backup's setting, where 0 means the
// default (10m) and a negative value keeps everything: on the command
// line, as on a mount, 0 keeps everything. It meant 10 minutes here, so an
// operator who copied the mount's "0 keeps everything" got trimming.
func backupRetain(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
