package main

import (
	"reflect"
	"strings"

	"github.com/urfave/cli/v2"
)

// Every command's --help ends with examples, and the long flag lists of
// the serving commands are grouped by what they are about.

// examples are each command's, by its full name.
var examples = map[string][]string{
	"mount": {
		"pbfs mount --journal /var/lib/pbfs/data /srv/data",
		"pbfs mount --journal /var/lib/pbfs/mysql --backup b1:7700 --backup b2:7700 --token-file /etc/pbfs/token /var/lib/mysql",
		"pbfs mount --journal J --fsync deferred --plugin http-proxy=/usr/local/lib/pbfs/http-proxy --plugin-config http-proxy:listen=:8080,upstream=http://127.0.0.1:80 /srv/www",
	},
	"backup": {
		"pbfs backup --listen :7700 --journal /var/lib/pbfs/b --token-file /etc/pbfs/token /srv/copy",
		"pbfs backup --listen :7700 --journal /var/lib/pbfs/b --admin 127.0.0.1:9701 /srv/copy   # with /metrics, /healthz, /readyz",
	},
	"promote": {"pbfs promote --journal /var/lib/pbfs/b --peer b2:7700 --backup b2:7700 /srv/copy"},
	"node": {
		"pbfs node --coordinator etcd://e1:2379,e2:2379,e3:2379 --name n1 --listen n1:7700 --journal /var/lib/pbfs/j \\\n     --on-promote 'systemctl start mariadb' --on-demote 'systemctl stop mariadb' /var/lib/mysql",
	},
	"volume-driver": {
		"pbfs volume-driver --defaults /etc/pbfs/volume-driver.yaml",
		"docker volume create --driver pbfs --opt backups=b1:7700,b2:7700 --opt fsync=replicated wpdb   # then: docker run -v wpdb:/var/lib/mysql ...",
	},
	"status": {"pbfs status --journal /var/lib/pbfs/data", "pbfs status --coordinator etcd://e1:2379 --json"},
	"elect":  {"pbfs elect --coordinator etcd://e1:2379 --force n2"},
	"resync": {"pbfs resync --journal /var/lib/pbfs/data", "pbfs resync --journal /var/lib/pbfs/data --backup b2:7700 --wait"},
	"member add": {
		"pbfs member add --journal /var/lib/pbfs/data b3:7700",
	},
	"member remove": {
		"pbfs member remove --journal /var/lib/pbfs/data b1:7700",
		"pbfs member remove --coordinator etcd://e1:2379 n3",
	},
	"verify":         {"pbfs verify --journal /var/lib/pbfs/data", "pbfs verify --journal /var/lib/pbfs/data --repair"},
	"barrier":        {"pbfs barrier --journal /var/lib/pbfs/data"},
	"events":         {"pbfs events --journal /var/lib/pbfs/data", "pbfs events --admin 127.0.0.1:9700 --no-history | jq -c 'select(.event != \"role\")'"},
	"journal ls":     {"pbfs journal ls --journal /var/lib/pbfs/data", "pbfs journal ls --journal /var/lib/pbfs/data --json"},
	"journal show":   {"pbfs journal show --journal /var/lib/pbfs/data 42"},
	"journal stats":  {"pbfs journal stats --journal /var/lib/pbfs/data"},
	"journal verify": {"pbfs journal verify --journal /var/lib/pbfs/data"},
	"journal replay": {"pbfs journal replay --journal /var/lib/pbfs/data --to 1200 /tmp/copy-of-the-start"},
	"plugin ls":      {"pbfs plugin ls --journal /var/lib/pbfs/data"},
	"plugin check":   {"pbfs plugin check /usr/local/lib/pbfs/http-proxy", "pbfs plugin check --volume /var/lib/mysql --config defaults-file=/etc/mysql/my.cnf /usr/local/lib/pbfs/mysql-hint"},
	"completion":     {"pbfs completion bash > /etc/bash_completion.d/pbfs", "pbfs completion zsh > \"${fpath[1]}/_pbfs\"", "pbfs completion fish > ~/.config/fish/completions/pbfs.fish"},
	"man":            {"pbfs man > /usr/local/share/man/man8/pbfs.8"},
}

// flagGroups names the group of each flag of the serving commands; help
// lists the groups in alphabetical order.
var flagGroups = map[string][]string{
	"Capture and volume": {"journal", "backing", "allow-other", "no-capture", "write-diff", "no-xattrs", "batch-bytes", "seal-interval",
		"fsync", "fsync-rule", "local-only", "trust-volume", "journal-reserve"},
	"Cluster":    {"coordinator", "name", "advertise", "cluster", "lease-ttl", "on-promote", "on-demote", "proxy-advertise"},
	"Monitoring": {"admin", "metrics-listen"},
	"Plugins":    {"plugin", "plugin-config"},
	"Replication": {"backup", "ack", "ack-level", "retain", "retain-max", "epoch", "degrade-after", "min-backups", "peer", "force",
		"listen", "accept-epoch", "repair-epoch", "adopt"},
	"Scheduling": {"monitor-slack", "timer-slack", "procs", "cpus"},
	"Security":   {"token", "token-file", "tls-cert", "tls-key", "tls-ca"},
}

// decorate adds each command's examples to its description and puts the
// serving commands' flags in their groups.
func decorate(cmds []*cli.Command, prefix string) {
	group := map[string]string{}
	for g, names := range flagGroups {
		for _, n := range names {
			group[n] = g
		}
	}
	var walk func([]*cli.Command, string)
	walk = func(cmds []*cli.Command, prefix string) {
		for _, c := range cmds {
			name := strings.TrimSpace(prefix + " " + c.Name)
			if ex := examples[name]; len(ex) > 0 {
				if c.Description != "" {
					c.Description += "\n\n"
				}
				c.Description += "Examples:\n   " + strings.Join(ex, "\n   ")
			}
			switch c.Name {
			case "mount", "backup", "promote", "node":
				for _, f := range c.Flags {
					setCategory(f, group[f.Names()[0]])
				}
			}
			walk(c.Subcommands, name)
		}
	}
	walk(cmds, prefix)
}

// setCategory sets a flag's help category, for the flag types that have
// one.
func setCategory(f cli.Flag, category string) {
	if category == "" {
		return
	}
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return
	}
	if field := v.Elem().FieldByName("Category"); field.IsValid() && field.CanSet() && field.Kind() == reflect.String {
		field.SetString(category)
	}
}
