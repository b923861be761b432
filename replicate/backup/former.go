package backup

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/plugins/sdk"
)

// What a primary's mount records in its journal for the backup this node
// becomes when it is deposed: the boot it ran in, and which paths it kept
// local-only (resync_scope.go).

// BootKey is the metadata value in which a primary's mount records the
// machine's boot id (mount/boot.go).
var BootKey = journal.KeyBoot.Name

// LocalRulesKey is the metadata value in which a primary's mount records
// the rules that decided which paths were local-only (EncodeLocalRules).
var LocalRulesKey = journal.KeyLocalRules.Name

// BootID is the kernel's id of this boot; nil if it cannot be read.
func BootID() []byte {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return nil
	}
	return bytes.TrimSpace(b)
}

// localRule is one rule as LocalRulesKey keeps it.
type localRule struct {
	Pattern string `json:"pattern"`
	Local   bool   `json:"local"`
}

// EncodeLocalRules is the value of LocalRulesKey for a mount's rules: the
// patterns in order, each with whether it makes a path local-only; empty
// when none does.
func EncodeLocalRules(rules []sdk.Rule) []byte {
	out := make([]localRule, 0, len(rules))
	any := false
	for _, r := range rules {
		out = append(out, localRule{Pattern: r.Pattern, Local: r.Hint.LocalOnly})
		any = any || r.Hint.LocalOnly
	}
	if !any {
		return []byte{}
	}
	b, _ := json.Marshal(out) // strings and booleans only
	return b
}

// localRules reads LocalRulesKey: whether a path (or a directory above
// it) was local-only on the primary that last used st; nil when none was.
func localRules(st interface{ Meta(string) ([]byte, error) }) (func(string) bool, error) {
	v, err := st.Meta(LocalRulesKey)
	if err != nil || len(v) == 0 {
		return nil, err
	}
	var rs []localRule
	if err := json.Unmarshal(v, &rs); err != nil {
		return nil, fmt.Errorf("read %s: %w", LocalRulesKey, err)
	}
	rules := make([]sdk.Rule, len(rs))
	for i, r := range rs {
		rules[i] = sdk.Rule{Pattern: r.Pattern, Hint: sdk.PathHint{LocalOnly: r.Local}}
	}
	return func(p string) bool {
		for i := 0; i <= len(p); i++ {
			if i == len(p) || p[i] == '/' {
				if h, _ := sdk.Match(rules, p[:i]); h.LocalOnly {
					return true
				}
			}
		}
		return false
	}, nil
}
