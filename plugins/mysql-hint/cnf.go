package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Options are a server's settings as its option files give them: names
// with '-' as '_', lowercased, the last value read winning.
type Options map[string]string

// serverGroups are the option-file groups mariadbd and mysqld read.
var serverGroups = map[string]bool{
	"mysqld": true, "server": true, "mariadb": true, "mariadbd": true, "client-server": true, "galera": true,
}

// readOptions reads an option file as the server would: the groups it
// reads (and their versioned variants for version, e.g. [mariadb-10.11]),
// !include and !includedir.
func readOptions(path, version string) (Options, error) {
	o := Options{}
	if err := o.read(path, version, 0); err != nil {
		return nil, err
	}
	return o, nil
}

func (o Options) read(path, version string, depth int) error {
	if depth > 10 {
		return fmt.Errorf("read %s: includes nested too deep", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read options: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	in := false
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		switch {
		case s == "" || s[0] == '#' || s[0] == ';':
		case strings.HasPrefix(s, "!includedir"):
			dir := strings.TrimSpace(strings.TrimPrefix(s, "!includedir"))
			files, _ := filepath.Glob(filepath.Join(dir, "*.cnf"))
			sort.Strings(files)
			for _, p := range files {
				if err := o.read(p, version, depth+1); err != nil {
					return err
				}
			}
		case strings.HasPrefix(s, "!include"):
			if err := o.read(strings.TrimSpace(strings.TrimPrefix(s, "!include")), version, depth+1); err != nil {
				return err
			}
		case s[0] == '[':
			g := strings.ToLower(strings.Trim(s, "[] \t"))
			in = serverGroups[g]
			if base, v, ok := strings.Cut(g, "-"); ok && version != "" && (base == "mysqld" || base == "mariadb" || base == "mariadbd") {
				in = strings.HasPrefix(version, v)
			}
		case in:
			o.set(s)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// set reads one "name[=value]" line.
func (o Options) set(s string) {
	name, value, hasValue := strings.Cut(s, "=")
	name = strings.ReplaceAll(strings.ToLower(strings.TrimSpace(name)), "-", "_")
	value = strings.TrimSpace(value)
	if i := strings.Index(value, " #"); i >= 0 && !strings.HasPrefix(value, "\"") && !strings.HasPrefix(value, "'") {
		value = strings.TrimSpace(value[:i])
	}
	if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
		value = value[1 : len(value)-1]
	}
	name = strings.TrimPrefix(name, "loose_")
	for _, p := range []string{"skip_", "disable_"} {
		if rest, ok := strings.CutPrefix(name, p); ok && !hasValue {
			o[rest] = "0"
			return
		}
	}
	if rest, ok := strings.CutPrefix(name, "enable_"); ok && !hasValue {
		o[rest] = "1"
		return
	}
	if !hasValue {
		value = "1"
	}
	o[name] = value
}

// get returns a setting or its default.
func (o Options) get(name, def string) string {
	if v, ok := o[name]; ok {
		return v
	}
	return def
}

// on reads a boolean setting.
func (o Options) on(name string, def bool) bool {
	v, ok := o[name]
	if !ok {
		return def
	}
	switch strings.ToLower(v) {
	case "0", "off", "false", "no":
		return false
	}
	return true
}
