package proxy_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/pbfs/pbfs/plugins/http-proxy/proxy"
	"github.com/pbfs/pbfs/plugins/sdk"
)

// Parsing the plugin's configuration: what is refused, and the defaults.

func TestConfigErrors(t *testing.T) {
	for _, c := range []sdk.Config{
		{"upstream": "http://127.0.0.1:1"},
		{"listen": "127.0.0.1:0"},
		{"listen": "127.0.0.1:0", "upstream": "ftp://x"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "pool": "0"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "durability": "maybe"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "none": "static"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "procs": "-1"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "procs": "all"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "monitor-slack": "-1ms"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "monitor-slack": "soon"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "upstream-wait": "0s"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "body-timeout": "0s"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "body-min-rate": "-1"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "max-body": "0"},
		{"listen": "127.0.0.1:0", "upstream": "http://x", "spool-memory": "-1"},
		// A body that could never be spooled: request bodies get half of spool-disk.
		{"listen": "127.0.0.1:0", "upstream": "http://x", "max-body": "600", "spool-memory": "100", "spool-disk": "1000"},
	} {
		if _, err := proxy.ParseConfig(c); err == nil {
			t.Errorf("config %v accepted", c)
		}
	}
}

// parseWith parses a minimal configuration with key set to value, or
// left out when value is "".
func parseWith(key, value string) (proxy.Config, error) {
	c := sdk.Config{"listen": "127.0.0.1:0", "upstream": "http://x"}
	if value != "" {
		c[key] = value
	}
	return proxy.ParseConfig(c)
}

func TestConfigMonitorSlack(t *testing.T) {
	for set, want := range map[string]time.Duration{"": time.Millisecond, "0": 0, "250us": 250 * time.Microsecond} {
		cfg, err := parseWith("monitor-slack", set)
		if err != nil || cfg.MonitorSlack != want {
			t.Errorf("monitor-slack=%q: got %v, %v; want %v", set, cfg.MonitorSlack, err, want)
		}
	}
}

func TestConfigProcs(t *testing.T) {
	for set, want := range map[string]int{"": 1, "0": 0, "4": 4} {
		cfg, err := parseWith("procs", set)
		if err != nil || cfg.Procs != want {
			t.Errorf("procs=%q: got %d, %v; want %d", set, cfg.Procs, err, want)
		}
	}
}

// recordingHost records every successful barrier's start and end.
type recordingHost struct {
	mu        sync.Mutex
	intervals [][2]time.Time
	seq       uint64
}

func (h *recordingHost) Barrier(ctx context.Context) (uint64, error) {
	start := time.Now()
	time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.intervals = append(h.intervals, [2]time.Time{start, time.Now()})
	return h.seq, nil
}

func (h *recordingHost) Status(context.Context) (sdk.Status, error) { return sdk.Status{}, nil }
