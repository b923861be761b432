// Command mysql-hint is a pbfs hint plugin for MySQL and MariaDB data
// directories, built only on the public SDK (plugins/sdk). It tells pbfs
// which files of a data directory must be replicated and which are
// local-only, which fsyncs are commits (the redo log, the binary log, the
// DDL and Aria logs) and so take the fsync policy the operator chose, and
// it checks the server's settings against replication under pbfs.
//
//	pbfs mount --plugin mysql=bin/mysql-hint \
//	    --plugin-config mysql:defaults-file=/etc/mysql/my.cnf,fsync=replicated ...
//	pbfs plugin check --volume /var/lib/mysql \
//	    --config defaults-file=/etc/mysql/my.cnf,fsync=replicated bin/mysql-hint
//
// docs/PLUGINS.md lists its configuration and explains each rule and
// finding.
package main

import "github.com/pbfs/pbfs/plugins/sdk"

func main() { sdk.Serve(&Hint{}) }
