// Command pbfs mounts a replicated volume, inspects its journal and asks
// for commit barriers. main.go only builds the app; each command lives in
// its own file.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	app := newApp()
	usageErrors(app)
	if helperCall(os.Args, app) {
		os.Exit(runHelper(os.Args, app))
	}
	argv, err := applyConfig(os.Args, app.Commands)
	if err == nil {
		argv, err = normalizeFlags(argv, app.Commands)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pbfs:", err)
		os.Exit(2)
	}
	if err := app.Run(argv); err != nil {
		if _, ok := err.(cli.ExitCoder); !ok {
			fmt.Fprintf(os.Stderr, "pbfs: %v%s\n", err, lateFlagHint(err, argv))
		}
		os.Exit(exitCode(err))
	}
}

// commandNotFound refuses an unknown command or subcommand as the usage
// error it is (urfave/cli's own answer exits 3).
func commandNotFound(c *cli.Context, name string) {
	if c.Command != nil && !hasSubcommands(c.Command) {
		// Help for a command that has none (urfave/cli shows it before
		// a required flag's error): that error says what is wrong.
		return
	}
	where := "pbfs"
	if c.Command != nil && c.Command.Name != "" && c.Command.Name != "pbfs" {
		where += " " + c.Command.FullName()
	}
	fmt.Fprintf(c.App.ErrWriter, "%s: no command %q (%s --help lists them)\n", where, name, where)
	cli.OsExiter(2)
}

// needCommand is the action of pbfs and of a command made of subcommands
// when none is named: the list of them, on stderr, and a usage error (the
// help urfave/cli shows by itself exits 0, and a script that lost its
// subcommand would go on as if it had run).
func needCommand(c *cli.Context) error {
	if c.Args().Present() {
		commandNotFound(c, c.Args().First())
		return nil
	}
	c.App.Writer = c.App.ErrWriter
	if c.Command != nil && c.Command.Name != "" {
		cli.ShowSubcommandHelp(c)
	} else {
		cli.ShowAppHelp(c)
	}
	return cli.Exit("", 2)
}

// hasSubcommands reports whether cmd has subcommands besides help.
func hasSubcommands(cmd *cli.Command) bool {
	for _, sub := range cmd.Subcommands {
		if !sub.HasName("help") {
			return true
		}
	}
	return false
}

// newApp builds the command line.
func newApp() *cli.App {
	app := &cli.App{
		Name:  "pbfs",
		Usage: "storage-layer primary-backup replication for unmodified stateful services",
		// Repeatable flags take one value each: --plugin-config values
		// are comma-separated key=value lists themselves.
		DisableSliceFlagSeparator: true,
		Version:                   appVersion(),
		Before:                    checkGlobal,
		CommandNotFound:           commandNotFound,
		Action:                    needCommand,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: []string{"PBFS_LOG_LEVEL"}},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json"},
			&cli.StringFlag{Name: "config", Usage: "a YAML file of settings for mount, backup, promote and node (etc/pbfs.yaml); flags override it", EnvVars: []string{"PBFS_CONFIG"}},
		},
		Commands: []*cli.Command{
			mountCommand(),
			backupCommand(),
			promoteCommand(),
			nodeCommand(),
			volumeDriverCommand(),
			statusCommand(),
			electCommand(),
			resyncCommand(),
			memberCommand(),
			eventsCommand(),
			verifyCommand(),
			barrierCommand(),
			journalCommand(),
			pluginCommand(),
			completionCommand(),
			manCommand(),
		},
		EnableBashCompletion: true,
	}
	decorate(app.Commands, "")
	return app
}
