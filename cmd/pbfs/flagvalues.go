package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/internal/human"
)

// sizeFlags take a byte count. pbfs prints sizes in binary units, and
// takes them the same way: --batch-bytes 64M, --journal-reserve 8MiB
// (human.ParseBytes); the flags themselves parse bytes, so normalizeFlags
// writes such values out in bytes before the command line is parsed.
var sizeFlags = []string{"batch-bytes", "journal-reserve", "max-paused-file"}

// flagValue checks, and for a size rewrites, the value v given to flag f
// of a command: the error says what a good value looks like, where the
// flag parser would say "parse error".
func flagValue(f cli.Flag, v string) (string, error) {
	name := f.Names()[0]
	if slices.Contains(sizeFlags, name) {
		if _, err := strconv.ParseInt(v, 10, 64); err == nil {
			return v, nil // bytes: the command's own checks judge its range
		}
		n, err := human.ParseBytes(v)
		if err != nil {
			return "", err
		}
		return strconv.FormatInt(n, 10), nil
	}
	switch f.(type) {
	case *cli.DurationFlag:
		if _, err := time.ParseDuration(v); err != nil {
			return "", fmt.Errorf("%q is not a duration: write it with a unit, such as 50ms, 2s or 1m30s", v)
		}
	case *cli.IntFlag, *cli.Int64Flag:
		if _, err := strconv.ParseInt(v, 0, 64); err != nil {
			return "", fmt.Errorf("%q is not a whole number", v)
		}
	case *cli.Uint64Flag:
		if _, err := strconv.ParseUint(v, 0, 64); err != nil {
			return "", fmt.Errorf("%q is not a whole number of 0 or more", v)
		}
	}
	return v, nil
}

// normalizeFlags checks the values argv (pbfs [global flags] COMMAND
// [args]) gives its command's flags with flagValue, and writes sizes out
// in bytes. A command or flag it does not know is left to the parser.
func normalizeFlags(argv []string, cmds []*cli.Command) ([]string, error) {
	i := 1
	for i < len(argv) && strings.HasPrefix(argv[i], "-") {
		name, _, inline := strings.Cut(strings.TrimLeft(argv[i], "-"), "=")
		if !inline && globalTakesValue(name) {
			i++ // the global flag's value
		}
		i++
	}
	if i >= len(argv) {
		return argv, nil
	}
	cmd := findCommand(cmds, argv[i])
	if cmd == nil {
		return argv, nil
	}
	out := slices.Clone(argv)
	for j := i + 1; j < len(out); j++ {
		a := out[j]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, v, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := findFlag(cmd, name)
		if f == nil {
			continue
		}
		if _, isBool := f.(*cli.BoolFlag); isBool {
			continue
		}
		at := j
		if !inline {
			if j+1 >= len(out) {
				break
			}
			at, v = j+1, out[j+1]
			j++
		}
		nv, err := flagValue(f, v)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", name, err)
		}
		if inline {
			out[at] = a[:len(a)-len(v)] + nv
		} else {
			out[at] = nv
		}
	}
	return out, nil
}
