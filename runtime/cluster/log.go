package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
)

// logWriter turns the line-oriented logs of raft (hclog) and memberlist
// (log.Logger) into slog records, keeping their level: "[DEBUG]", "[INFO]",
// "[WARN]" and "[ERR]"/"[ERROR]" prefixes map to slog levels, so debug noise
// is dropped unless the slog handler wants it.
type logWriter struct {
	log       *slog.Logger
	component string
	// filter, if set, sees each line first and swallows it by returning
	// true (gossip junk, gossipjunk.go).
	filter func(line string) bool

	mu  sync.Mutex
	buf []byte
}

func newLogWriter(l *slog.Logger, component string) *logWriter {
	return &logWriter{log: l, component: component}
}

// Write implements io.Writer: each complete line becomes one record.
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a runaway line without newline
		w.emit(string(w.buf))
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func (w *logWriter) emit(line string) {
	level := slog.LevelInfo
	for _, m := range []struct {
		tag string
		lv  slog.Level
	}{{"[TRACE]", slog.LevelDebug - 4}, {"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERROR]", slog.LevelError}, {"[ERR]", slog.LevelError}} {
		if i := strings.Index(line, m.tag); i >= 0 {
			level = m.lv
			line = line[i+len(m.tag):]
			break
		}
	}
	line = strings.TrimSpace(line)
	if line == "" || (w.filter != nil && w.filter(line)) || !w.log.Enabled(context.Background(), level) {
		return
	}
	w.log.Log(context.Background(), level, line, "component", w.component)
}
