package main

import (
	"io"
	"log/slog"
	"os"
)

// newLogger logs to out at level: JSON lines when format is "json", or when
// it is "" and out is not a terminal (a file, a pipe, journald, a
// container's log); text on a terminal or when format is "text".
func newLogger(format, level string, out io.Writer) *slog.Logger {
	lvl := slog.LevelInfo
	_ = lvl.UnmarshalText([]byte(level)) // Validate has refused anything else
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "text" || (format == "" && isTerminal(out)) {
		return slog.New(slog.NewTextHandler(out, opts))
	}
	return slog.New(slog.NewJSONHandler(out, opts))
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
