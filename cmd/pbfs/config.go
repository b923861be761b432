package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// A configuration file (--config FILE, or PBFS_CONFIG) describes what
// flags would: one section per command (mount, backup, promote, node),
// whose keys are that command's flag names, plus `volume` for its VOLUME
// argument. promote and node also read the mount section (node all but
// its backups; their own section wins). Flags given on the command line override the file; a
// list given there replaces the file's. Decoding is strict: an unknown
// section or key is an error, and so is a value of the wrong shape.
// ${VAR} and $VAR in values are expanded from the environment, and $$ is
// a literal $; hook commands (on-promote, on-demote) are kept exactly as
// written, for the shell that runs them to expand. etc/pbfs.yaml is the
// annotated sample; a test keeps it complete and valid.

// configSections are the commands a file may configure.
var configSections = []string{"mount", "backup", "promote", "node"}

// Config is a parsed configuration file: section -> key -> values.
type Config map[string]map[string][]string

// loadConfig reads and checks a configuration file against the commands'
// flags.
func loadConfig(path string, cmds []*cli.Command) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var raw map[string]map[string]yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg := Config{}
	for section, keys := range raw {
		cmd := findCommand(cmds, section)
		if cmd == nil || !slices.Contains(configSections, section) {
			return nil, fmt.Errorf("config %s: unknown section %q (want %s)", path, section, strings.Join(configSections, ", "))
		}
		cfg[section] = map[string][]string{}
		for key, node := range keys {
			f := findFlag(cmd, key)
			if f == nil && key != "volume" {
				return nil, fmt.Errorf("config %s: %s: unknown key %q (pbfs %s has no --%s)", path, section, key, section, key)
			}
			vals, err := values(&node, f)
			if err == nil && f != nil {
				for i, v := range vals {
					if vals[i], err = flagValue(f, v); err != nil {
						break
					}
				}
			}
			if err != nil {
				return nil, fmt.Errorf("config %s: %s.%s (line %d): %w", path, section, key, node.Line, err)
			}
			cfg[section][key] = vals
		}
	}
	return cfg, nil
}

// values reads a key's value: a scalar, or a list for a repeatable flag.
func values(n *yaml.Node, f cli.Flag) ([]string, error) {
	_, repeatable := f.(*cli.StringSliceFlag)
	expand := expandEnv
	if f != nil && slices.Contains(hookFlags, f.Names()[0]) {
		expand = func(s string) string { return s }
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return nil, errors.New("empty value")
		}
		return []string{expand(n.Value)}, nil
	case yaml.SequenceNode:
		if !repeatable {
			return nil, errors.New("a list, but the flag takes one value")
		}
		var out []string
		for _, item := range n.Content {
			if item.Kind != yaml.ScalarNode {
				return nil, errors.New("a list of lists or maps; want a list of strings")
			}
			out = append(out, expand(item.Value))
		}
		return out, nil
	}
	return nil, errors.New("a map; want a value or a list")
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func findFlag(cmd *cli.Command, name string) cli.Flag {
	for _, f := range cmd.Flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// applyConfig rewrites argv (pbfs [global flags] COMMAND [args]) so that
// the file's settings for COMMAND come first, where the command line's own
// flags override them. It returns argv unchanged when there is no file or
// the command takes none.
func applyConfig(argv []string, cmds []*cli.Command) ([]string, error) {
	path, i := os.Getenv("PBFS_CONFIG"), 1
	var global []string
	for i < len(argv) && strings.HasPrefix(argv[i], "-") {
		a := argv[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesValue := globalTakesValue(name)
		if takesValue && !hasVal && i+1 < len(argv) {
			val = argv[i+1]
			i++
		}
		if name == "config" {
			if val == "" {
				// A bare trailing --config used to fall through to the help
				// text and exit 0, as if nothing were wrong.
				return nil, errors.New("--config needs a FILE")
			}
			path = val
		} else {
			global = append(global, a)
			if takesValue && !hasVal {
				global = append(global, val)
			}
		}
		i++
	}
	out := append([]string{argv[0]}, global...)
	if i >= len(argv) {
		return out, nil
	}
	name := argv[i]
	cmd := findCommand(cmds, name)
	rest := argv[i+1:]
	if path == "" || cmd == nil || !slices.Contains(configSections, name) {
		return append(append(out, name), rest...), nil
	}
	cfg, err := loadConfig(path, cmds)
	if err != nil {
		return nil, err
	}
	given, positional := scanArgs(cmd, rest)
	merged := map[string][]string{}
	if name == "promote" || name == "node" {
		for k, v := range cfg["mount"] {
			// A node's backups are the members etcd lists.
			if name == "node" && k == "backup" {
				continue
			}
			if findFlag(cmd, k) != nil || k == "volume" {
				merged[k] = v
			}
		}
	}
	for k, v := range cfg[name] {
		merged[k] = v
	}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out = append(out, name)
	for _, k := range keys {
		if k == "volume" || given[k] {
			continue
		}
		for _, v := range merged[k] {
			out = append(out, "--"+k+"="+v)
		}
	}
	out = append(out, rest...)
	if v, ok := merged["volume"]; ok && !positional {
		out = append(out, v...)
	}
	return out, nil
}

// scanArgs reports which flags the command line gives and whether it has
// a positional argument.
func scanArgs(cmd *cli.Command, args []string) (map[string]bool, bool) {
	given := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return given, i+1 < len(args)
		}
		if !strings.HasPrefix(a, "-") {
			return given, true
		}
		name, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := findFlag(cmd, name)
		if f == nil {
			continue
		}
		given[f.Names()[0]] = true
		if _, isBool := f.(*cli.BoolFlag); !isBool && !hasVal {
			i++ // its value
		}
	}
	return given, false
}

// hookFlags are shell commands: a file's value for them is run as written.
var hookFlags = []string{"on-promote", "on-demote"}

// expandEnv expands ${VAR} and $VAR from the environment, and $$ to $.
func expandEnv(s string) string {
	const dollar = "\x00pbfs-dollar\x00"
	return strings.ReplaceAll(os.ExpandEnv(strings.ReplaceAll(s, "$$", dollar)), dollar, "$")
}

// globalTakesValue reports whether the global flag name takes a value
// (which may follow it as the next argument).
func globalTakesValue(name string) bool {
	return name == "config" || name == "log-level" || name == "log-format"
}
