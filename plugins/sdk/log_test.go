package sdk

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// A plugin's log lines reach the host as go-plugin's JSON, durations as
// text: the host relays each value as it comes, and nanoseconds would
// reach the operator as a bare number.
func TestLoggerLinesForTheHost(t *testing.T) {
	var buf bytes.Buffer
	newLogger(&buf, slog.LevelInfo).Info("timer slack kept", "timer_slack", 50*time.Microsecond, slog.Group("g", "wait", 2*time.Second))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	g, _ := line["g"].(map[string]any)
	if line["@message"] != "timer slack kept" || line["@level"] != "info" || line["timer_slack"] != "50µs" || g["wait"] != "2s" || line["time"] != nil {
		t.Fatalf("line %s", buf.Bytes())
	}
}
