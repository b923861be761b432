package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/host"
)

// pluginFlags are the mount's plugin declarations.
var pluginFlags = []cli.Flag{
	&cli.StringSliceFlag{Name: "plugin", Usage: "run a plugin: NAME=PATH (repeatable)"},
	&cli.StringSliceFlag{Name: "plugin-config", Usage: "configure a plugin: NAME:key=value,key=value (repeatable)"},
}

func pluginCommand() *cli.Command {
	return &cli.Command{
		Name:   "plugin",
		Usage:  "list a mount's plugins, or check a plugin binary",
		Action: needCommand,
		Subcommands: []*cli.Command{
			{
				Name:  "ls",
				Usage: "list the plugins of the running mount: state, pid, restarts, protocol",
				Flags: []cli.Flag{&cli.StringFlag{Name: "journal", Required: true, Usage: "journal directory of the running mount"}},
				Action: func(c *cli.Context) error {
					cl, err := control.Dial(c.String("journal"))
					if err != nil {
						return cli.Exit("plugin ls: "+err.Error(), 1)
					}
					st, err := cl.Status(c.Context)
					if err != nil {
						return cli.Exit("plugin ls: "+err.Error(), 1)
					}
					tw := tabwriter.NewWriter(c.App.Writer, 2, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tSTATE\tPID\tRESTARTS\tKINDS\tPROTOCOL\tMTLS\tSINCE\tPATH\tLAST ERROR")
					for _, p := range st.Plugins {
						fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%v\t%s\t%s\t%s\n", p.Name, p.State, p.Pid, p.Restarts,
							strings.Join(p.Info.Kinds, ","), p.Info.Protocol, p.Info.MTLS, p.Since.Format(time.RFC3339), p.Path, p.LastError)
					}
					return tw.Flush()
				},
			},
			{
				Name:      "check",
				Usage:     "start a plugin binary, check its handshake and protocol version, and print what it serves",
				ArgsUsage: "PATH",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "config", Usage: "for a hint plugin: key=value,... to ask its rules and checks with (mysql-hint: datadir=DIR,defaults-file=FILE)"},
					&cli.StringFlag{Name: "volume", Usage: "for a hint plugin: the volume to ask its rules for"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("plugin check: want one PATH", 2)
					}
					return checkPlugin(c, c.Args().First())
				},
			},
		},
	}
}

func checkPlugin(c *cli.Context, path string) error {
	// Parsed before the plugin starts, and blamed on the flag given.
	specs, err := host.ParseSpecs([]string{"p=" + path}, []string{"p:" + c.String("config")})
	if err != nil {
		return cli.Exit(fmt.Sprintf("plugin check: --config %q: want key=value,key=value", c.String("config")), 2)
	}
	ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	defer cancel()
	// go-plugin's own lifecycle lines would drown the verdict; show them
	// only when debugging.
	log := slog.New(slog.DiscardHandler)
	if c.String("log-level") == "debug" {
		log = logger(c)
	}
	p, err := host.Launch(ctx, path, host.Options{Logger: log, LogLevel: c.String("log-level")})
	if err != nil {
		switch {
		case errors.Is(err, host.ErrVersion):
			return cli.Exit(fmt.Sprintf("plugin check: refused: %v\n(this pbfs speaks plugin protocol %d and accepts the version before it; rebuild the plugin with a matching plugins/sdk)", err, sdk.ProtocolVersion), 1)
		case errors.Is(err, host.ErrHandshake):
			return cli.Exit(fmt.Sprintf("plugin check: refused: %v\n(a pbfs plugin calls sdk.Serve from plugins/sdk in its main)", err), 1)
		}
		return cli.Exit("plugin check: "+err.Error(), 1)
	}
	defer p.Kill()
	info := p.Info()
	w := c.App.Writer
	fmt.Fprintf(w, "ok: %s\nname: %s\nversion: %s\nprotocol: %d (host speaks %d)\nkinds: %s\nmtls: %v\n", path, info.Name, info.Version,
		info.Protocol, sdk.ProtocolVersion, strings.Join(info.Kinds, ", "), info.MTLS)
	if !info.Serves("hint") {
		return nil
	}
	// Absolute, as a mount gives its volume to its plugins.
	volume := c.String("volume")
	if volume != "" {
		if volume, err = filepath.Abs(volume); err != nil {
			return cli.Exit("plugin check: --volume: "+err.Error(), 2)
		}
	}
	rules, err := p.Remote().Rules(ctx, "check", volume, specs[0].Config)
	if err != nil {
		return cli.Exit("plugin check: "+err.Error(), 1)
	}
	for _, r := range rules {
		fmt.Fprintf(w, "rule: %s local_only=%v fsync=%s %s\n", r.Pattern, r.Hint.LocalOnly, r.Hint.Fsync, r.Hint.Reason)
	}
	findings, err := p.Remote().Check(ctx, "check", volume, specs[0].Config)
	if err != nil {
		return cli.Exit("plugin check: "+err.Error(), 1)
	}
	bad := 0
	for _, f := range findings {
		fmt.Fprintf(w, "%s: %s = %s: %s\n", f.Severity, f.Setting, f.Value, f.Message)
		if f.Severity == sdk.SeverityError {
			bad++
		}
	}
	if bad > 0 {
		return cli.Exit(fmt.Sprintf("plugin check: %d setting(s) can lose acknowledged data under pbfs", bad), 1)
	}
	return nil
}
