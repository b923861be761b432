package main

import (
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"
)

// logger builds the slog logger the global flags ask for.
func logger(c *cli.Context) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.String("log-format") == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
