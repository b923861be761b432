package dockervol

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/host"
	"github.com/pbfs/pbfs/replicate/primary"
	"github.com/pbfs/pbfs/replicate/wire"
)

// ErrBadOption refuses an option a volume cannot be created with: unknown,
// malformed, or naming a backup that does not answer.
var ErrBadOption = errors.New("bad volume option")

// Options are a volume's options as the engine passes them (`docker volume
// create --opt KEY=VALUE`), each a flag of the volume's `pbfs mount`.
type Options map[string]string

// option is one option a volume takes: the mount flag it becomes and how
// its value is checked.
type option struct {
	flag  string
	check func(string) error
	usage string
}

// knownOptions are the options a volume takes. The engine keeps one value
// per key (a repeated --opt replaces the earlier one), so the backups are
// one comma-separated option: a repeated `backup` would silently keep only
// the last address.
var knownOptions = map[string]option{
	"backups":       {flag: "backup", check: checkBackups, usage: "HOST:PORT[,HOST:PORT...] of the volume's pbfs backups, or none"},
	"ack":           {flag: "ack", check: checkAck, usage: "all, majority, none or a number"},
	"ack-level":     {flag: "ack-level", check: oneOf("disk", "memory"), usage: "disk or memory"},
	"fsync":         {flag: "fsync", check: checkFsync, usage: "local, replicated, both or deferred"},
	"min-backups":   {flag: "min-backups", check: checkCount, usage: "a number"},
	"degrade-after": {flag: "degrade-after", check: checkDuration, usage: "a duration (30s)"},
	"retain":        {flag: "retain", check: checkDuration, usage: "a duration"},
	"retain-max":    {flag: "retain-max", check: checkDuration, usage: "a duration"},
	"write-diff":    {flag: "write-diff", check: checkBool, usage: "true or false"},
	"no-xattrs":     {flag: "no-xattrs", check: checkBool, usage: "true or false"},
	"token-file":    {flag: "token-file", check: checkTokenFile, usage: "file holding the replication secret (mode 0600)"},
	"tls-cert":      {flag: "tls-cert", check: checkFile, usage: "file"},
	"tls-key":       {flag: "tls-key", check: checkFile, usage: "file"},
	"tls-ca":        {flag: "tls-ca", check: checkFile, usage: "file"},
	"plugin":        {flag: "plugin", check: checkPlugin, usage: "NAME=PATH of a pbfs plugin"},
	"plugin-config": {flag: "plugin-config", check: checkPlugin, usage: "NAME:key=value,key=value"},
}

// refusedOptions are options with a reason to refuse them that says what
// to do instead.
var refusedOptions = map[string]string{
	"backup":  "the engine keeps only the last of repeated --opt values: list every backup in one option, backups=HOST:PORT,HOST:PORT",
	"token":   "the engine stores options where `docker volume inspect` shows them: put the secret in a file (mode 0600) and give token-file=FILE",
	"journal": "the driver keeps each volume's journal in its state directory",
}

// optionNames lists the known options, for an error.
func optionNames() string {
	return strings.Join(slices.Sorted(maps.Keys(knownOptions)), ", ")
}

// Merge returns the defaults overlaid with opts, checked. An error wraps
// ErrBadOption and names the option and the remedy.
func Merge(defaults, opts Options) (Options, error) {
	out := maps.Clone(defaults)
	if out == nil {
		out = Options{}
	}
	maps.Copy(out, opts)
	for _, k := range slices.Sorted(maps.Keys(out)) {
		if why, ok := refusedOptions[k]; ok {
			return nil, fmt.Errorf("%w %q: %s", ErrBadOption, k, why)
		}
		o, ok := knownOptions[k]
		if !ok {
			return nil, fmt.Errorf("%w %q: unknown; want one of %s", ErrBadOption, k, optionNames())
		}
		if err := o.check(out[k]); err != nil {
			return nil, fmt.Errorf("%w %s=%q: %v (want %s)", ErrBadOption, k, out[k], err, o.usage)
		}
	}
	if err := checkTogether(out); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadOption, err)
	}
	return out, nil
}

// checkTogether checks what no single option shows: an ack policy for the
// number of backups, and a secret where there are backups.
func checkTogether(o Options) error {
	backups := o.Backups()
	if _, err := primary.ParseAck(o["ack"], len(backups)); err != nil && len(backups) > 0 {
		return fmt.Errorf("ack=%s with %d backups: %v", o["ack"], len(backups), err)
	}
	if len(backups) > 0 && o["token-file"] == "" && os.Getenv("PBFS_TOKEN") == "" {
		return errors.New("backups need the replication secret: give token-file=FILE (in the volume's options or the driver's defaults file)")
	}
	if _, err := host.ParseSpecs(nonEmpty(o["plugin"]), nonEmpty(o["plugin-config"])); err != nil {
		return fmt.Errorf("plugin: %v", err)
	}
	return nil
}

// Backups lists the volume's backup addresses.
func (o Options) Backups() []string {
	v := strings.TrimSpace(o["backups"])
	if v == "" || v == "none" {
		return nil
	}
	var out []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// MountArgs turns merged options into `pbfs mount` flags.
func (o Options) MountArgs() []string {
	var args []string
	for _, k := range slices.Sorted(maps.Keys(o)) {
		v, flag := o[k], knownOptions[k].flag
		switch k {
		case "backups":
			for _, a := range o.Backups() {
				args = append(args, "--backup", a)
			}
		case "write-diff", "no-xattrs":
			if b, _ := strconv.ParseBool(v); b {
				args = append(args, "--"+flag)
			}
		default:
			args = append(args, "--"+flag+"="+v)
		}
	}
	return args
}

// LoadDefaults reads the driver's defaults file: a YAML map of volume
// options (etc/volume-driver.yaml), checked as a volume's would be.
func LoadDefaults(path string) (Options, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("defaults: %w", err)
	}
	var raw map[string]yaml.Node
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("defaults %s: %w", path, err)
	}
	out := Options{}
	for k, n := range raw {
		if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
			return nil, fmt.Errorf("defaults %s: %s (line %d): want one value (backups: one comma-separated string)", path, k, n.Line)
		}
		out[k] = n.Value
	}
	if _, err := Merge(out, nil); err != nil {
		return nil, fmt.Errorf("defaults %s: %w", path, err)
	}
	return out, nil
}

func nonEmpty(v string) []string {
	if v == "" {
		return nil
	}
	return []string{v}
}

func checkBackups(v string) error {
	if strings.TrimSpace(v) == "none" {
		return nil
	}
	addrs := Options{"backups": v}.Backups()
	if len(addrs) == 0 {
		return errors.New("no address")
	}
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return fmt.Errorf("%q is not HOST:PORT", a)
		}
	}
	if len(addrs) != len(slices.Compact(slices.Sorted(slices.Values(addrs)))) {
		return errors.New("an address given twice")
	}
	return nil
}

func checkAck(v string) error {
	_, err := primary.ParseAck(v, 1<<16)
	return err
}

func checkFsync(v string) error {
	p, err := sdk.ParseFsyncPolicy(v)
	if err == nil && p == sdk.FsyncDefault {
		err = errors.New("not a policy")
	}
	return err
}

func checkCount(v string) error {
	if n, err := strconv.Atoi(v); err != nil || n < 0 {
		return errors.New("not a count")
	}
	return nil
}

func checkDuration(v string) error {
	if d, err := time.ParseDuration(v); err != nil || d < 0 {
		return errors.New("not a duration")
	}
	return nil
}

func checkBool(v string) error {
	_, err := strconv.ParseBool(v)
	return err
}

func checkTokenFile(v string) error {
	_, err := wire.LoadToken("", v)
	return err
}

func checkFile(v string) error {
	_, err := os.Stat(v)
	return err
}

func checkPlugin(v string) error {
	if v == "" {
		return errors.New("empty")
	}
	return nil
}

func oneOf(choices ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(choices, v) {
			return errors.New("not one of the choices")
		}
		return nil
	}
}
