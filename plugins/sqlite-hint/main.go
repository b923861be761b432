// Command sqlite-hint is a pbfs hint plugin for SQLite databases, and the
// smallest example of a hint plugin a third party writes for its own
// service (PostgreSQL's pg_stat_tmp/ would be the same few lines). In WAL
// mode SQLite keeps the WAL index in a "-shm" file that every connection
// maps shared and that SQLite rebuilds from the WAL when the first
// connection opens the database: it describes this machine's
// connections, not the data, so it is local-only. Fsyncs of the WAL and
// of the rollback journal are commits and take the policy the operator
// chose (fsync=replicated: a COMMIT returns once it is durable on the
// backups).
//
//	pbfs mount --plugin sqlite=bin/sqlite-hint --plugin-config sqlite:fsync=replicated ...
package main

import (
	"context"
	"fmt"

	"github.com/pbfs/pbfs/plugins/sdk"
)

func main() { sdk.Serve(&Hint{}) }

// Hint is the plugin.
type Hint struct{ rules []sdk.Rule }

// Info names the plugin.
func (h *Hint) Info() sdk.Info { return sdk.Info{Name: "sqlite-hint", Version: "1"} }

// Rules: -shm files anywhere are local-only; -wal and -journal fsyncs
// take the policy of config key fsync (default: the mount's).
func (h *Hint) Rules(_ context.Context, env sdk.HintEnv) ([]sdk.Rule, error) {
	for k := range env.Config {
		if k != "fsync" {
			return nil, fmt.Errorf("config: unknown key %q (want fsync)", k)
		}
	}
	policy, err := sdk.ParseFsyncPolicy(env.Config.String("fsync", "default"))
	if err != nil {
		return nil, fmt.Errorf("config: fsync: %w", err)
	}
	h.rules = []sdk.Rule{
		{Pattern: "**/*-shm", Hint: sdk.PathHint{LocalOnly: true, Reason: "SQLite WAL index: shared memory, rebuilt from the WAL at open"}},
		{Pattern: "**/*-wal", Hint: sdk.PathHint{Fsync: policy, Reason: "SQLite write-ahead log: its fsync is the commit"}},
		{Pattern: "**/*-journal", Hint: sdk.PathHint{Fsync: policy, Reason: "SQLite rollback journal: its fsync is the commit"}},
	}
	return h.rules, nil
}

// Validate checks the configuration (sdk.Validator).
func (h *Hint) Validate(c sdk.Config) error {
	_, err := (&Hint{}).Rules(context.Background(), sdk.HintEnv{Config: c})
	return err
}

// Classify answers from the rules.
func (h *Hint) Classify(_ context.Context, paths []string) ([]sdk.PathHint, error) {
	return sdk.MatchAll(h.rules, paths), nil
}
