package coordinator

import (
	"context"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// slogWriter turns the line-oriented output of hclog (raft) and log.Logger
// (memberlist) into structured records on the one injected slog.Logger.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for tag, lv := range map[string]slog.Level{"[ERROR]": slog.LevelError, "[ERR]": slog.LevelError, "[WARN]": slog.LevelWarn, "[DEBUG]": slog.LevelDebug, "[TRACE]": slog.LevelDebug} {
		if i := strings.Index(line, tag); i >= 0 {
			level = lv
			line = strings.TrimSpace(line[i+len(tag):])
			break
		}
	}
	line = strings.TrimPrefix(line, "[INFO]")
	w.l.Log(context.Background(), level, strings.TrimSpace(line))
	return len(p), nil
}

func hclogFor(l *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:        name,
		Level:       hclog.Info,
		Output:      slogWriter{l.With("component", name)},
		DisableTime: true,
	})
}

func stdlogFor(l *slog.Logger, name string) *log.Logger {
	return log.New(slogWriter{l.With("component", name)}, "", 0)
}
