package wire

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// HCLog adapts a slog.Logger to the hclog.Logger go-plugin wants, so both
// ends log through the logger they were given.
func HCLog(l *slog.Logger) hclog.Logger { return &hcl{l: l} }

// HCLogDropping is HCLog without the lines drop says to leave out (by
// message), for go-plugin's that say nothing the host has not said
// better.
func HCLogDropping(l *slog.Logger, drop func(msg string) bool) hclog.Logger {
	return &hcl{l: l, drop: drop}
}

type hcl struct {
	l    *slog.Logger
	name string
	args []any
	drop func(msg string) bool
}

func toSlog(level hclog.Level) slog.Level {
	switch {
	case level <= hclog.Debug:
		return slog.LevelDebug
	case level == hclog.Info:
		return slog.LevelInfo
	case level == hclog.Warn:
		return slog.LevelWarn
	}
	return slog.LevelError
}

func (h *hcl) Log(level hclog.Level, msg string, args ...any) {
	if h.drop != nil && h.drop(msg) {
		return
	}
	// go-plugin adds the plugin's own "timestamp" to lines it relays;
	// slog stamps the time already.
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "timestamp" {
			args = append(args[:i:i], args[i+2:]...)
			break
		}
	}
	h.l.Log(context.Background(), toSlog(level), msg, args...)
}
func (h *hcl) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hcl) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hcl) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hcl) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hcl) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }
func (h *hcl) enabled(level hclog.Level) bool {
	return h.l.Enabled(context.Background(), toSlog(level))
}
func (h *hcl) IsTrace() bool        { return h.enabled(hclog.Trace) }
func (h *hcl) IsDebug() bool        { return h.enabled(hclog.Debug) }
func (h *hcl) IsInfo() bool         { return h.enabled(hclog.Info) }
func (h *hcl) IsWarn() bool         { return h.enabled(hclog.Warn) }
func (h *hcl) IsError() bool        { return h.enabled(hclog.Error) }
func (h *hcl) ImpliedArgs() []any   { return h.args }
func (h *hcl) Name() string         { return h.name }
func (h *hcl) SetLevel(hclog.Level) {}
func (h *hcl) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Debug, hclog.Info, hclog.Warn} {
		if h.enabled(l) {
			return l
		}
	}
	return hclog.Error
}
func (h *hcl) With(args ...any) hclog.Logger {
	return &hcl{l: h.l.With(args...), name: h.name, args: append(append([]any{}, h.args...), args...), drop: h.drop}
}
func (h *hcl) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}
func (h *hcl) ResetNamed(name string) hclog.Logger {
	return &hcl{l: h.l.With("component", name), name: name, args: h.args, drop: h.drop}
}
func (h *hcl) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo)
}
func (h *hcl) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return h.StandardLogger(nil).Writer()
}
