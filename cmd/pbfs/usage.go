package main

import (
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// Exit codes, the same for every command: 2 for a usage error (a flag or
// argument pbfs refuses before touching anything), 1 for a failure.

// version is set at link time (-ldflags "-X main.version=v1.2.3"); a
// plain go build reports the VCS revision it was built from.
var version = ""

func appVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		if info.Main.Version == "" || info.Main.Version == "(devel)" {
			return "devel (built without version control information)"
		}
		return info.Main.Version
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "dev-" + rev
}

// checkGlobal refuses global flags pbfs does not know the meaning of.
func checkGlobal(c *cli.Context) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return cli.Exit(fmt.Sprintf("pbfs: --log-level %q: want debug, info, warn or error", c.String("log-level")), 2)
	}
	if f := c.String("log-format"); f != "text" && f != "json" {
		return cli.Exit(fmt.Sprintf("pbfs: --log-format %q: want text or json", f), 2)
	}
	return nil
}

// usageErrors makes every command's flag-parsing errors usage errors.
func usageErrors(app *cli.App) {
	app.OnUsageError = onUsage("pbfs")
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			name := prefix + " " + c.Name
			c.OnUsageError = onUsage(name)
			if c.Action != nil && len(c.Subcommands) == 0 {
				c.Action = checkArgs(name, c.ArgsUsage, c.Action)
			}
			walk(name, c.Subcommands)
		}
	}
	walk("pbfs", app.Commands)
}

// checkArgs refuses, before action runs, what urfave/cli lets through: a
// flag after the arguments (it stops parsing flags at the first argument,
// so "mount VOLUME --journal J" read as if --journal were missing), and
// more arguments than the command takes (one when argsUsage names one,
// none when it is empty).
func checkArgs(name, argsUsage string, action cli.ActionFunc) cli.ActionFunc {
	max := 0
	if argsUsage != "" {
		max = 1
	}
	return func(c *cli.Context) error {
		for _, a := range c.Args().Slice() {
			if len(a) > 1 && a[0] == '-' {
				return cli.Exit(fmt.Sprintf("%s: %q comes after the arguments: give flags before them (see %s --help)", name, a, name), 2)
			}
		}
		if c.NArg() > max {
			want := "no arguments"
			if max == 1 {
				want = "one argument, " + strings.Fields(argsUsage)[0]
			}
			return cli.Exit(fmt.Sprintf("%s: takes %s; got %q (see %s --help)", name, want, c.Args().Slice(), name), 2)
		}
		return action(c)
	}
}

// lateFlagHint explains a missing required flag that argv does give, after
// the arguments, where urfave/cli no longer reads flags.
func lateFlagHint(err error, argv []string) string {
	if !strings.HasPrefix(err.Error(), "Required flag") {
		return ""
	}
	for _, a := range argv[1:] {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && strings.Contains(err.Error(), strconv.Quote(name)) {
			return fmt.Sprintf(" (%s is given, but after an argument: give flags before the arguments)", a)
		}
	}
	return ""
}

// positive is a duration flag's check that it is above 0, run before the
// command does anything.
func positive(cmd, flag string) func(*cli.Context, time.Duration) error {
	return func(c *cli.Context, d time.Duration) error {
		if d <= 0 {
			// Printed here: urfave/cli does not print an error a flag's
			// action returns.
			fmt.Fprintf(c.App.ErrWriter, "pbfs %s: --%s %v: want a positive duration\n", cmd, flag, d)
			return cli.Exit("", 2)
		}
		return nil
	}
}

func onUsage(name string) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		return cli.Exit(fmt.Sprintf("%s: %v (see %s --help)", name, err, name), 2)
	}
}

// exitCode is the code for an error Run returned.
func exitCode(err error) int {
	if ec, ok := err.(cli.ExitCoder); ok {
		return ec.ExitCode()
	}
	if strings.HasPrefix(err.Error(), "Required flag") || strings.HasPrefix(err.Error(), "Required flags") {
		return 2
	}
	return 1
}

// A flag whose usage sentence gives its default already, or a boolean
// (false unless given), shows no second "(default: ...)".
var defaultSuffix = regexp.MustCompile(`\s*\(default: [^()]*\)$`)

func init() {
	plain := cli.FlagStringer
	cli.FlagStringer = func(f cli.Flag) string {
		s := plain(f)
		df, ok := f.(cli.DocGenerationFlag)
		_, isBool := f.(*cli.BoolFlag)
		if ok && (isBool || strings.Contains(df.GetUsage(), "(default")) {
			s = defaultSuffix.ReplaceAllString(s, "")
		}
		return s
	}
}

// checkListen refuses a listen address net.Listen would refuse for its
// form (not for being taken).
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want HOST:PORT", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	return nil
}
