package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// pbfs as mount(8)'s helper, so that `mount -t fuse.pbfs SRC MNT -o OPTS`
// and /etc/fstab entries of type fuse.pbfs work. mount(8) runs
//
//	mount.fuse.pbfs SRC MNT [-sfnv] [-o OPTS] [-t fuse.pbfs]
//
// (make install links /sbin/mount.fuse.pbfs to pbfs); without that link it
// runs fuse3's mount.fuse3, which runs `pbfs SRC MNT -o OPTS`, taken the
// same way. SRC is the backing directory (MNT itself for a volume mounted
// over itself). Each option is one of pbfs mount's flags, or a global
// one, as name=value (a bare name for a switch; _ for -): journal=DIR,
// backup=HOST:PORT (repeatable), token_file=F, allow_other, config=FILE,
// log_level=debug and so on; log=FILE says where the daemon logs. The
// options mount(8) and systemd add are ignored. The helper starts
// `pbfs mount` in the background (a session of its own) and returns once
// the volume is mounted and served, or fails with the daemon's own words
// when the mount fails (helperrun.go).

// helperName is the helper's name, as mount(8) looks for it.
const helperName = "mount.fuse.pbfs"

// Exit statuses, as mount(8) defines them.
const (
	helperUsage  = 1  // incorrect invocation
	helperFailed = 32 // mount failure
)

// ignoredOpts are the options mount(8), fstab and systemd pass that mean
// nothing to pbfs (a pbfs mount is nosuid and nodev, as every FUSE mount
// fusermount3 makes; suid and dev are what mount.fuse3 adds).
var ignoredOpts = []string{"defaults", "rw", "auto", "noauto", "user", "nouser", "users", "owner", "group",
	"_netdev", "nofail", "dev", "nodev", "suid", "nosuid", "exec", "async", "atime", "noatime", "relatime",
	"norelatime", "strictatime", "nostrictatime", "lazytime", "nolazytime", "diratime", "nodiratime", "silent", "loud"}

// refusedOpts are generic options pbfs cannot honour; ignored, they would
// leave a mount other than the one asked for.
var refusedOpts = map[string]string{
	"ro":      "a pbfs mount is read-write",
	"noexec":  "a pbfs mount cannot refuse exec",
	"sync":    "a pbfs mount cannot make every write synchronous; use --fsync",
	"dirsync": "a pbfs mount cannot make directory changes synchronous",
	"token":   "/etc/fstab is world-readable: put the token in a file and give token_file=FILE",
	"backing": "the source (SRC) is the backing directory",
}

// helper is a parsed helper call.
type helper struct {
	src, mnt string
	opts     []string
	fake     bool // -f: check everything, mount nothing
	sloppy   bool // -s: ignore unknown options
	verbose  bool
}

// helperCall reports whether argv is a mount helper's call: pbfs run as
// mount.fuse.pbfs (or a name that starts so), or as mount.fuse3 runs it,
// `pbfs SRC MNT ... -o OPTS` with no command.
func helperCall(argv []string, app *cli.App) bool {
	if strings.HasPrefix(filepath.Base(argv[0]), helperName) {
		return true
	}
	if len(argv) < 5 || strings.HasPrefix(argv[1], "-") || app.Command(argv[1]) != nil {
		return false
	}
	return slices.Contains(argv[3:], "-o")
}

// parseHelper reads the helper's arguments (after argv[0]).
func parseHelper(args []string) (helper, error) {
	var h helper
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "-t" || a == "-N":
			if i+1 >= len(args) {
				return h, fmt.Errorf("%s needs a value", a)
			}
			i++
			switch a {
			case "-o":
				h.opts = append(h.opts, strings.Split(args[i], ",")...)
			case "-N":
				return h, errors.New("-N (another mount namespace) is not supported: run mount in that namespace")
			}
		case strings.HasPrefix(a, "-o"):
			h.opts = append(h.opts, strings.Split(a[2:], ",")...)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for _, f := range a[1:] {
				switch f {
				case 'f':
					h.fake = true
				case 's':
					h.sloppy = true
				case 'v':
					h.verbose = true
				case 'n': // no mtab: there is none to write
				default:
					return h, fmt.Errorf("unknown flag -%c", f)
				}
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return h, fmt.Errorf("want SRC MNT [-o OPTS], got %d arguments", len(pos))
	}
	h.src, h.mnt = pos[0], pos[1]
	return h, nil
}

// daemonArgs turns the call into the arguments of `pbfs mount` (after
// argv[0]) and the daemon's log file ("" for the default). Unknown
// options are an error, or with -s a warning.
func (h helper) daemonArgs(app *cli.App, warn func(string)) ([]string, string, error) {
	mountCmd := app.Command("mount")
	var global, flags []string
	logFile := ""
	for _, opt := range h.opts {
		name, val, hasVal := strings.Cut(opt, "=")
		key := strings.ReplaceAll(name, "_", "-")
		if opt == "" || slices.Contains(ignoredOpts, name) || strings.HasPrefix(name, "x-") || name == "comment" {
			continue
		}
		if why, ok := refusedOpts[key]; ok {
			return nil, "", fmt.Errorf("option %s: %s", name, why)
		}
		if key == "log" {
			if val == "" {
				return nil, "", errors.New("option log needs a file: log=FILE")
			}
			logFile = val
			continue
		}
		f := flagNamed(app.Flags, key)
		dst := &global
		if f == nil {
			f, dst = flagNamed(mountCmd.Flags, key), &flags
		}
		if f == nil {
			if h.sloppy {
				warn(fmt.Sprintf("ignoring option %s (-s)", name))
				continue
			}
			return nil, "", fmt.Errorf("unknown option %q: want pbfs mount's flags as name=value (journal=DIR, backup=HOST:PORT, token_file=FILE, allow_other, config=FILE, ...; pbfs mount --help lists them)", name)
		}
		_, isBool := f.(*cli.BoolFlag)
		switch {
		case hasVal:
			*dst = append(*dst, "--"+key+"="+val)
		case isBool:
			*dst = append(*dst, "--"+key)
		default:
			return nil, "", fmt.Errorf("option %s needs a value: %s=...", name, name)
		}
	}
	args := append(global, "mount")
	args = append(args, flags...)
	if !sameDir(h.src, h.mnt) {
		args = append(args, "--backing", h.src)
	}
	return append(args, h.mnt), logFile, nil
}

// flagNamed finds the flag called name among flags.
func flagNamed(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// sameDir reports whether a and b are one directory.
func sameDir(a, b string) bool {
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	if err1 != nil || err2 != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return ra == rb
}

// defaultLog is where the daemon logs unless log=FILE says otherwise:
// /var/log/pbfs/, one file per mount point named as systemd names its
// mount unit (/srv/pbfs/mysql: srv-pbfs-mysql.log).
func defaultLog(mnt string) string {
	abs, err := filepath.Abs(mnt)
	if err != nil {
		abs = mnt
	}
	name := strings.ReplaceAll(strings.Trim(abs, "/"), "/", "-")
	if name == "" {
		name = "root"
	}
	return filepath.Join("/var/log/pbfs", name+".log")
}

// logWriter opens the daemon's log for appending, making its directory.
func logWriter(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	return f, nil
}
