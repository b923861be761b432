package host

import (
	"fmt"
	"regexp"
	"strings"
)

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// ParseSpecs reads the repeatable mount flags `--plugin NAME=PATH` and
// `--plugin-config NAME:key=value,key=value`. Several --plugin-config
// flags for one name add up; a later key wins. Values cannot contain
// commas.
func ParseSpecs(plugins, configs []string) ([]Spec, error) {
	var specs []Spec
	index := map[string]int{}
	for _, f := range plugins {
		name, path, ok := strings.Cut(f, "=")
		if !ok || path == "" {
			return nil, fmt.Errorf("--plugin %q: want NAME=PATH", f)
		}
		if !validName.MatchString(name) {
			return nil, fmt.Errorf("--plugin %q: name %q: use lowercase letters, digits, - and _", f, name)
		}
		if _, dup := index[name]; dup {
			return nil, fmt.Errorf("--plugin %q: %s is declared twice", f, name)
		}
		index[name] = len(specs)
		specs = append(specs, Spec{Name: name, Path: path, Config: map[string]string{}})
	}
	for _, f := range configs {
		name, kvs, ok := strings.Cut(f, ":")
		if !ok {
			return nil, fmt.Errorf("--plugin-config %q: want NAME:key=value,...", f)
		}
		i, known := index[name]
		if !known {
			return nil, fmt.Errorf("--plugin-config %q: no --plugin %s=PATH declares %s", f, name, name)
		}
		for _, kv := range strings.Split(kvs, ",") {
			if kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("--plugin-config %q: %q: want key=value", f, kv)
			}
			specs[i].Config[k] = v
		}
	}
	return specs, nil
}
