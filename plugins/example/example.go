package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pbfs/pbfs/plugins/sdk"
)

// Example is both a frontend and a hint plugin.
type Example struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	rules  []sdk.Rule
}

// Info names the plugin.
func (e *Example) Info() sdk.Info { return sdk.Info{Name: "example", Version: "1.0.0"} }

// Start begins the heartbeat: a barrier every interval (default 1s).
func (e *Example) Start(_ context.Context, env sdk.Env) error {
	if err := env.Config.Only(exampleKeys...); err != nil {
		return err
	}
	every, err := env.Config.Duration("interval", time.Second)
	if err != nil {
		return err
	}
	if every <= 0 {
		return fmt.Errorf("config: interval must be positive")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e.mu.Lock()
	e.cancel, e.done = cancel, done
	e.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			bctx, bcancel := context.WithTimeout(ctx, every)
			seq, err := env.Host.Barrier(bctx)
			bcancel()
			if err != nil {
				env.Logger.Warn("heartbeat barrier failed", "err", err)
				continue
			}
			st, err := env.Host.Status(ctx)
			if err != nil {
				env.Logger.Warn("heartbeat status failed", "err", err)
				continue
			}
			env.Logger.Info("heartbeat", "seq", seq, "backups", len(st.Backups))
		}
	}()
	return nil
}

// Stop ends the heartbeat.
func (e *Example) Stop(ctx context.Context) error {
	e.mu.Lock()
	cancel, done := e.cancel, e.done
	e.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Validate checks the configuration (sdk.Validator).
func (e *Example) Validate(c sdk.Config) error {
	if err := c.Only(exampleKeys...); err != nil {
		return err
	}
	_, err := c.Duration("interval", time.Second)
	return err
}

// exampleKeys are the settings the example knows, as a frontend and as a
// hint (one configuration serves both).
var exampleKeys = []string{"interval", "local", "both", "replicated"}

// Rules reads local=, both= and replicated= (|-separated patterns).
func (e *Example) Rules(_ context.Context, env sdk.HintEnv) ([]sdk.Rule, error) {
	if err := env.Config.Only(exampleKeys...); err != nil {
		return nil, err
	}
	var rules []sdk.Rule
	for _, k := range []struct {
		key  string
		hint sdk.PathHint
	}{
		{"local", sdk.PathHint{LocalOnly: true, Reason: "example: local=" + env.Config.String("local", "")}},
		{"both", sdk.PathHint{Fsync: sdk.FsyncBoth, Reason: "example: both"}},
		{"replicated", sdk.PathHint{Fsync: sdk.FsyncReplicated, Reason: "example: replicated"}},
	} {
		for _, pat := range strings.Split(env.Config.String(k.key, ""), "|") {
			if pat == "" {
				continue
			}
			if strings.HasPrefix(pat, "/") || strings.Contains(pat, "..") {
				return nil, fmt.Errorf("config: %s=%q: patterns are relative to the volume", k.key, pat)
			}
			rules = append(rules, sdk.Rule{Pattern: pat, Hint: k.hint})
		}
	}
	e.mu.Lock()
	e.rules = rules
	e.mu.Unlock()
	return rules, nil
}

// Classify answers from the rules.
func (e *Example) Classify(_ context.Context, paths []string) ([]sdk.PathHint, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return sdk.MatchAll(e.rules, paths), nil
}
