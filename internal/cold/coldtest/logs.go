package coldtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// LogRecorder is a slog.Handler that keeps every record, at every level,
// for tests that assert what the cold tier logs (state changes logged once,
// not per block).
type LogRecorder struct {
	mu   sync.Mutex
	recs []slog.Record // guarded by mu
}

// Enabled implements slog.Handler: every level is kept.
func (h *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (h *LogRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// WithAttrs implements slog.Handler; attributes are not kept.
func (h *LogRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup implements slog.Handler; groups are not kept.
func (h *LogRecorder) WithGroup(string) slog.Handler { return h }

// Lines returns the messages of the records at level or above.
func (h *LogRecorder) Lines(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level >= level {
			out = append(out, r.Message)
		}
	}
	return out
}

// Count returns how many records at level or above have a message
// containing sub.
func (h *LogRecorder) Count(level slog.Level, sub string) int {
	n := 0
	for _, l := range h.Lines(level) {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}
