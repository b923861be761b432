package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/plugins/sdk"
)

// hintFlags classify the volume's paths without a plugin (or ahead of
// one): docs/ARCHITECTURE.md, "Local-only paths and fsync policies".
var hintFlags = []cli.Flag{
	&cli.StringFlag{Name: "fsync", Value: "local", Usage: "what a fsync on the volume means where no rule says: local (sync the primary's disk), " +
		"replicated (return once everything written before it is durable on the ack set), both, " +
		"or deferred (return at once; durable once the frontend's next barrier covers it: only when every client goes through the HTTP proxy)"},
	&cli.StringSliceFlag{Name: "fsync-rule", Usage: "PATTERN=POLICY: fsyncs of matching paths mean POLICY (repeatable; patterns as in hint rules, e.g. ib_logfile*=replicated)"},
	&cli.BoolFlag{Name: "trust-volume", Usage: "serve the volume even if the machine restarted after an unclean stop while fsyncs skipped the primary's disk (replicated or deferred; it may lack acknowledged writes)"},
	&cli.StringSliceFlag{Name: "local-only", Usage: "PATTERN: matching paths stay on the primary's disk and are never shipped (repeatable, e.g. '*.pid' or 'tmp/')"},
}

// hintConfig reads hintFlags: the flag rules, local-only ones first, and
// the default policy.
func hintConfig(c *cli.Context) ([]sdk.Rule, sdk.FsyncPolicy, error) {
	def, ok := policyOf(c.String("fsync"))
	if !ok {
		return nil, 0, fmt.Errorf("--fsync %q: want %s", c.String("fsync"), policyChoices)
	}
	var rules []sdk.Rule
	for _, p := range c.StringSlice("local-only") {
		if err := sdk.CheckPattern(p); err != nil {
			return nil, 0, fmt.Errorf("--local-only: %w", err)
		}
		rules = append(rules, sdk.Rule{Pattern: p, Hint: sdk.PathHint{LocalOnly: true, Reason: "--local-only"}})
	}
	for _, r := range c.StringSlice("fsync-rule") {
		pat, name, ok := strings.Cut(r, "=")
		if !ok {
			return nil, 0, fmt.Errorf("--fsync-rule %q: want PATTERN=POLICY", r)
		}
		if err := sdk.CheckPattern(pat); err != nil {
			return nil, 0, fmt.Errorf("--fsync-rule: %w", err)
		}
		policy, ok := policyOf(name)
		if !ok {
			return nil, 0, fmt.Errorf("--fsync-rule %q: want %s after =", r, policyChoices)
		}
		rules = append(rules, sdk.Rule{Pattern: pat, Hint: sdk.PathHint{Fsync: policy, Reason: "--fsync-rule"}})
	}
	return rules, def, nil
}

// policyChoices are the policies an operator names on the command line.
const policyChoices = "local, replicated, both or deferred"

// policyOf reads one of policyChoices ("default" is a plugin's word for
// leaving it to these flags).
func policyOf(name string) (sdk.FsyncPolicy, bool) {
	p, err := sdk.ParseFsyncPolicy(name)
	return p, err == nil && p != sdk.FsyncDefault
}
