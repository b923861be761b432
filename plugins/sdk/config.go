package sdk

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is a plugin's configuration: the key=value pairs the operator
// gave with `pbfs mount --plugin-config NAME:key=value,...`.
type Config map[string]string

// String returns the value of key, or def when it is unset.
func (c Config) String(key, def string) string {
	if v, ok := c[key]; ok {
		return v
	}
	return def
}

// Required returns the value of key, or an error naming it.
func (c Config) Required(key string) (string, error) {
	v, ok := c[key]
	if !ok || v == "" {
		return "", fmt.Errorf("config: %q is required", key)
	}
	return v, nil
}

// Int returns key as an integer, def when unset.
func (c Config) Int(key string, def int) (int, error) {
	v, ok := c[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("config: %s=%q: want an integer", key, v)
	}
	return n, nil
}

// Duration returns key as a time.Duration ("250ms", "5s"), def when unset.
func (c Config) Duration(key string, def time.Duration) (time.Duration, error) {
	v, ok := c[key]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("config: %s=%q: want a duration like 5s", key, v)
	}
	return d, nil
}

// Bool returns key as a boolean, def when unset.
func (c Config) Bool(key string, def bool) (bool, error) {
	v, ok := c[key]
	if !ok {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("config: %s=%q: want true or false", key, v)
	}
	return b, nil
}

// Only refuses a key that is not one of keys: a misspelt setting must not
// be ignored quietly.
func (c Config) Only(keys ...string) error {
	var unknown []string
	for k := range c {
		if !slices.Contains(keys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return fmt.Errorf("config: unknown key(s) %s (known: %s)", strings.Join(unknown, ", "), strings.Join(keys, ", "))
}
