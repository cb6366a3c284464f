package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Lifecycle endpoints (admin only, like /admin/reload):
//
//	GET  /admin/inventory[?tenant=T]
//	POST /admin/purge?tenant=T
//	POST /admin/expire?older_than=DURATION[&tenant=T]
//	POST /admin/backfill?budget=BYTES[&tenant=T]
//
// Each answers newline-delimited JSON: zero or more {"progress": "..."}
// lines as the work goes, then one {"result": ...} line, or an
// {"error": "..."} line when the operation failed after it started. An
// operation refused before it starts answers an HTTP error instead: 400
// (bad parameter), 409 (another operation runs), 501 (no backfill sink).
// A client that disconnects cancels the operation; each is safe to rerun.

// RegisterLifecycle installs the lifecycle endpoints.
func (h *Handler) RegisterLifecycle(l *Lifecycle) {
	h.HandleView("admin/inventory", func(w http.ResponseWriter, r *http.Request) {
		actor := h.actorOf(r)
		s := newStream(w)
		res, err := l.Inventory(r.Context(), actor, r.URL.Query().Get("tenant"), s.progress)
		s.finish(res, err)
	})
	h.HandleAdmin("purge", func(w http.ResponseWriter, r *http.Request, actor string) {
		tenant := r.URL.Query().Get("tenant")
		if tenant == "" {
			http.Error(w, "purge needs ?tenant=NAME\n", http.StatusBadRequest)
			return
		}
		s := newStream(w)
		res, err := l.PurgeTenant(r.Context(), actor, tenant, s.progress)
		s.finish(res, err)
	})
	h.HandleAdmin("expire", func(w http.ResponseWriter, r *http.Request, actor string) {
		age, err := time.ParseDuration(r.URL.Query().Get("older_than"))
		if err != nil || age <= 0 {
			http.Error(w, "expire needs ?older_than=DURATION (e.g. 168h), a positive Go duration\n", http.StatusBadRequest)
			return
		}
		s := newStream(w)
		res, err := l.Expire(r.Context(), actor, r.URL.Query().Get("tenant"), time.Now().Add(-age), s.progress)
		s.finish(res, err)
	})
	h.HandleAdmin("backfill", func(w http.ResponseWriter, r *http.Request, actor string) {
		budget, err := strconv.ParseInt(r.URL.Query().Get("budget"), 10, 64)
		if err != nil || budget <= 0 {
			http.Error(w, "backfill needs ?budget=BYTES, a positive integer\n", http.StatusBadRequest)
			return
		}
		s := newStream(w)
		res, err := l.Backfill(r.Context(), actor, r.URL.Query().Get("tenant"), budget, s.progress)
		s.finish(res, err)
	})
}

// actorOf names the caller of a view endpoint (the authorizer already
// accepted it).
func (h *Handler) actorOf(r *http.Request) string {
	if a := h.authz.Load(); a != nil {
		if actor, err := (*a)(r); err == nil {
			return actor
		}
	}
	return ""
}

// stream writes an operation's NDJSON answer. Nothing is written until
// the first progress line, so an operation refused at once still gets an
// HTTP error status.
type stream struct {
	w       http.ResponseWriter
	enc     *json.Encoder
	started bool
}

func newStream(w http.ResponseWriter) *stream { return &stream{w: w, enc: json.NewEncoder(w)} }

func (s *stream) start() {
	if !s.started {
		s.started = true
		s.w.Header().Set("Content-Type", "application/x-ndjson")
		s.w.WriteHeader(http.StatusOK)
	}
}

func (s *stream) progress(format string, args ...any) {
	s.start()
	s.enc.Encode(map[string]string{"progress": fmt.Sprintf(format, args...)})
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *stream) finish(result any, err error) {
	if err != nil && !s.started {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, ErrBusy):
			code = http.StatusConflict
		case errors.Is(err, ErrBadTenant):
			code = http.StatusBadRequest
		case errors.Is(err, ErrNoBackfill):
			code = http.StatusNotImplemented
		}
		http.Error(s.w, err.Error()+"\n", code)
		return
	}
	s.start()
	if err != nil {
		s.enc.Encode(map[string]any{"error": err.Error(), "partial": result})
		return
	}
	s.enc.Encode(map[string]any{"result": result})
}
