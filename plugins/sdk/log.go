package sdk

import (
	"io"
	"log/slog"
	"strings"
)

// newLogger returns a logger whose lines the host parses as its own log
// entries: JSON with go-plugin's "@level" and "@message" keys.
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			// JSON would carry nanoseconds, and the host relays the number.
			return slog.String(a.Key, a.Value.Duration().String())
		}
		if len(groups) > 0 {
			return a
		}
		switch a.Key {
		case slog.TimeKey:
			return slog.Attr{} // the host stamps its own time
		case slog.LevelKey:
			return slog.String("@level", strings.ToLower(a.Value.String()))
		case slog.MessageKey:
			return slog.String("@message", a.Value.String())
		}
		return a
	}})
	return slog.New(h)
}

// levelFromEnv reads the level the host asked for (PBFS_PLUGIN_LOG_LEVEL).
func levelFromEnv(v string) slog.Level {
	var l slog.Level
	if l.UnmarshalText([]byte(v)) != nil {
		return slog.LevelInfo
	}
	return l
}
