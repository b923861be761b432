package mount

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pbfs/pbfs/capture"
	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/host"
)

// Hints decide, per path of the volume, whether it is local-only and what
// its fsync means (capture.Class). They come from the mount's flags
// (Config.Rules, Config.Fsync) and from hint plugins, asked once before the
// volume is mounted: flag rules first, then each plugin's in the order
// given, then Config.Fsync for everything else. The first rule that
// matches a path decides.
//
// Rules are fixed for the life of the mount: which paths are shipped must
// not change under a running backup. Their local-only part is part of the
// volume's fingerprint at a clean stop (offline.go), so a mount started
// with different local-only rules resyncs its backups: files that were
// local-only and now are not must reach them, and the reverse must go.

// loadHints asks every hint plugin for its rules and for its checks of
// the service's settings, whose findings it logs. A hint plugin that
// refuses its configuration stops the start: without its rules,
// local-only files would be shipped and fsyncs would not mean what the
// operator chose. A plugin that cannot be launched at all is not known to
// be a hint: as any plugin's failure, it does not stop the mount (the
// supervisor keeps trying it), and the log says that its rules, if it has
// any, are not in force until the next start.
func (m *Mount) loadHints(ctx context.Context) ([]sdk.Rule, error) {
	rules := append([]sdk.Rule(nil), m.cfg.Rules...)
	for _, sp := range m.cfg.Plugins {
		got, err := m.askHint(ctx, sp)
		var launch *launchError
		if errors.As(err, &launch) {
			m.log.Error("plugin could not be launched before mounting; if it is a hint plugin, its rules are not in force until the next start",
				"plugin", sp.Name, "err", launch.err)
			continue
		}
		if ce, ok := errors.AsType[*ConfigError](err); ok {
			return nil, &ConfigError{fmt.Errorf("plugin %s: %w", sp.Name, ce.Err)}
		}
		if err != nil {
			return nil, fmt.Errorf("hint plugin %s: %w", sp.Name, err)
		}
		rules = append(rules, got...)
	}
	return rules, nil
}

// launchError: the plugin could not be started or spoke no protocol this
// host knows.
type launchError struct{ err error }

func (e *launchError) Error() string { return e.err.Error() }

func (m *Mount) askHint(ctx context.Context, sp host.Spec) ([]sdk.Rule, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := host.Launch(ctx, sp.Path, host.Options{Logger: m.log.With("plugin", sp.Name), LogLevel: m.cfg.PluginLogLevel})
	if err != nil {
		return nil, &launchError{err}
	}
	defer p.Kill()
	if err := p.Remote().Validate(ctx, sp.Name, sp.Config); err != nil {
		return nil, &ConfigError{err}
	}
	if p.Info().Serves("frontend") {
		m.frontends++
	}
	if !p.Info().Serves("hint") {
		return nil, nil
	}
	rules, err := p.Remote().Rules(ctx, sp.Name, m.cfg.Mountpoint, sp.Config)
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		if err := sdk.CheckPattern(r.Pattern); err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.Pattern, err)
		}
	}
	findings, err := p.Remote().Check(ctx, sp.Name, m.cfg.Mountpoint, sp.Config)
	if err != nil {
		return nil, err
	}
	for _, f := range findings {
		args := []any{"plugin", sp.Name, "setting", f.Setting, "value", f.Value, "finding", f.Message}
		switch f.Severity {
		case sdk.SeverityError:
			m.log.Error("the service's settings can lose acknowledged data under pbfs", args...)
		case sdk.SeverityWarning:
			m.log.Warn("the service's settings", args...)
		default:
			m.log.Info("the service's settings", args...)
		}
		m.findings.WithLabelValues(sp.Name, f.Severity.String()).Inc()
	}
	m.log.Info("hint rules", "plugin", sp.Name, "rules", len(rules), "findings", len(findings))
	return rules, nil
}

// classifier turns rules into capture's view; nil when every path is
// replicated and fsyncs are local (capture's fast path).
func classifier(rules []sdk.Rule, def sdk.FsyncPolicy) capture.Classifier {
	if len(rules) == 0 && (def == sdk.FsyncDefault || def == sdk.FsyncLocal) {
		return nil
	}
	return func(p string) capture.Class {
		h, _ := sdk.Match(rules, p)
		if h.LocalOnly {
			return capture.Class{LocalOnly: true}
		}
		policy := h.Fsync
		if policy == sdk.FsyncDefault {
			policy = def
		}
		return capture.Class{Fsync: capturePolicy(policy)}
	}
}

func capturePolicy(p sdk.FsyncPolicy) capture.FsyncPolicy {
	switch p {
	case sdk.FsyncReplicated:
		return capture.FsyncReplicated
	case sdk.FsyncBoth:
		return capture.FsyncBoth
	case sdk.FsyncDeferred:
		return capture.FsyncDeferred
	}
	return capture.FsyncLocal
}

// localRulesSum hashes what decides which paths are shipped: the
// local-only rules, in order, and where replicated rules come before them;
// nil when nothing is local-only (fingerprints then stay as before rules
// existed).
func localRulesSum(rules []sdk.Rule) []byte {
	if !slices.ContainsFunc(rules, func(r sdk.Rule) bool { return r.Hint.LocalOnly }) {
		return nil
	}
	h := sha256.New()
	for _, r := range rules {
		fmt.Fprintf(h, "%q %v\n", r.Pattern, r.Hint.LocalOnly)
	}
	return h.Sum(nil)
}
