package audit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
)

// Redacted is the value substituted for anything secret-bearing.
const Redacted = "[REDACTED]"

// Secret holds secret material (bearer tokens, keys). It never reveals its
// content through slog, fmt or encoding/json. Use Bytes to access it.
type Secret []byte

// Bytes returns the raw secret. Never log the result.
func (s Secret) Bytes() []byte { return []byte(s) }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue(Redacted) }

// String implements fmt.Stringer.
func (Secret) String() string { return Redacted }

// GoString implements fmt.GoStringer.
func (Secret) GoString() string { return "audit.Secret(" + Redacted + ")" }

// Format implements fmt.Formatter for every verb (%v %+v %#v %s %q %x %X %d ...).
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		io.WriteString(f, s.GoString())
		return
	}
	if verb == 'q' {
		io.WriteString(f, `"`+Redacted+`"`)
		return
	}
	io.WriteString(f, Redacted)
}

// MarshalJSON implements json.Marshaler.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + Redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler.
func (Secret) MarshalText() ([]byte, error) { return []byte(Redacted), nil }

// Event kinds, the value of the "event" field.
const (
	EventAuthFailure = "auth_failure"
	EventDenied      = "denied"
	EventRateLimited = "rate_limited"
	EventRotation    = "rotation"
	EventAdminAction = "admin_action"
	EventIntegrity   = "integrity"
	// EventSuppressed summarizes the auth_failure events of one source
	// and interval that the Throttle did not write.
	EventSuppressed = "suppressed"
)

// Logger emits audit events. A nil *Logger discards events. A Logger is
// safe for concurrent use.
type Logger struct {
	h   slog.Handler // nil: events are counted, not written (Discard)
	now func() time.Time
	thr *throttle
	// file is the size-bounded file among the sink's writers, for Stats;
	// nil if none.
	file *File

	authFailures atomic.Uint64
	suppressed   atomic.Uint64
	summaries    atomic.Uint64
	writeErrors  atomic.Uint64
}

// Options tunes a Logger. The zero value is valid.
type Options struct {
	// Now overrides the clock (tests): the timestamps and the throttle's
	// intervals. Default time.Now.
	Now func() time.Time
	// AuthFailures bounds the auth_failure lines per source (Throttle);
	// the zero value takes DefaultThrottle.
	AuthFailures Throttle
	// File is the size-bounded audit file the sink writes to, if any; its
	// rotations and size are reported in Stats.
	File *File
}

// New returns a Logger writing JSON lines to w, the dedicated audit sink.
func New(w io.Writer) *Logger { return NewWithOptions(w, Options{}) }

// NewWithOptions is New with options.
func NewWithOptions(w io.Writer, o Options) *Logger {
	l := newLogger(o)
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return a
			}
			return redactAttr(a)
		},
	})
	l.h = h.WithAttrs([]slog.Attr{slog.Bool("audit", true)})
	return l
}

// Discard returns a Logger that writes nothing but still counts (Stats):
// the audit sink "off".
func Discard() *Logger { return newLogger(Options{}) }

func newLogger(o Options) *Logger {
	l := &Logger{now: o.Now, file: o.File}
	if l.now == nil {
		l.now = time.Now
	}
	l.thr = &throttle{cfg: o.AuthFailures.withDefaults(), flush: l.Flush, sources: make(map[string]*window)}
	return l
}

// Stats are a Logger's counters.
type Stats struct {
	// AuthFailures counts every failed authentication reported, written
	// or not (and with the sink off).
	AuthFailures uint64
	// Suppressed counts the auth_failure events not written because
	// their source was over its Throttle.Lines; Summaries the
	// "suppressed" lines that reported them.
	Suppressed, Summaries uint64
	// Sources is the number of sources the throttle tracks now, the
	// aggregate bucket included (at most Throttle.Sources + 1).
	Sources uint64
	// WriteErrors counts the events the sink failed to take (lost).
	WriteErrors uint64
	// Rotations counts the audit file's rotations, FileBytes is its
	// current size (both 0 without a File).
	Rotations, FileBytes uint64
}

// Stats returns the counters; a nil Logger's are zero.
func (l *Logger) Stats() Stats {
	if l == nil {
		return Stats{}
	}
	s := Stats{AuthFailures: l.authFailures.Load(), Suppressed: l.suppressed.Load(), Summaries: l.summaries.Load(),
		Sources: uint64(l.thr.len()), WriteErrors: l.writeErrors.Load()}
	if l.file != nil {
		s.Rotations, s.FileBytes = l.file.Rotations(), uint64(max(l.file.Size(), 0))
	}
	return s
}

// Flush writes the summaries of the throttle's windows that have ended.
// The throttle's timer calls it at each window's end, so a caller need
// not; it is exported for tests that drive an injected clock.
func (l *Logger) Flush() {
	if l == nil {
		return
	}
	l.summarize(l.thr.due(l.now(), false))
}

// Close writes the summaries of every window still open (over the time
// since each began) and stops the throttle's timer. The Logger still
// takes events after Close, but without the timer a later window is
// summarized only when its source fails again. It does not close the
// sink.
func (l *Logger) Close() {
	if l == nil {
		return
	}
	l.summarize(l.thr.due(l.now(), true))
}

func (l *Logger) summarize(sums []summary) {
	for _, s := range sums {
		l.summaries.Add(1)
		l.emit(EventSuppressed, s.message(),
			slog.String("suppressed_event", EventAuthFailure), slog.String("source", s.source),
			slog.Uint64("count", s.count), slog.String("interval", s.span.String()),
			slog.Int64("interval_ms", s.span.Milliseconds()))
	}
}

// secretKeyWords are substrings (of a normalized key) that mark an attribute
// as secret-bearing. Keys are lower-cased with '-', '.', ' ' mapped to '_'.
var secretKeyWords = []string{
	"secret", "token", "password", "passwd", "passphrase", "pwd",
	"credential", "bearer", "authorization", "auth_header", "cookie",
	"private", "privkey", "key_material", "keymaterial", "raw_key", "rawkey",
	"master_key", "signing_key", "api_key", "apikey", "seal_key", "sealkey",
	"fingerprint", "fprint", "hash", "digest", "hmac", "sha", "mac",
	"nonce", "salt", "seed",
}

// exactSecretKeys are whole keys that are secret-bearing although they are
// too short or generic for substring matching.
var exactSecretKeys = map[string]bool{"key": true, "k": true, "fp": true, "psk": true, "auth": true}

// IsSecretKey reports whether an attribute key looks secret-bearing.
func IsSecretKey(key string) bool {
	k := strings.Map(func(r rune) rune {
		switch r {
		case '-', '.', ' ':
			return '_'
		}
		return r
	}, strings.ToLower(key))
	if exactSecretKeys[k] {
		return true
	}
	// Split camelCase-free, so "keyID" -> "keyid" is fine (an identifier).
	for _, w := range secretKeyWords {
		if strings.Contains(k, w) {
			// "mac" and "sha" are short; only match them as whole words.
			if (w == "mac" || w == "sha" || w == "pwd" || w == "seed") && !hasWord(k, w) {
				continue
			}
			return true
		}
	}
	return false
}

func hasWord(k, w string) bool {
	for _, part := range strings.FieldsFunc(k, func(r rune) bool { return r == '_' }) {
		if part == w || strings.HasPrefix(part, w) && strings.Trim(part[len(w):], "0123456789") == "" {
			return true
		}
	}
	return false
}

// redactAttr applies the key and type rules to an attribute, recursing into
// groups (a group with a secret-looking key is redacted whole). Values of
// kind Any are reduced to safe forms: Secret and []byte are redacted, errors
// and fmt.Stringers become their strings (Secret fields inside them format as
// [REDACTED]), and any other type (structs, maps, slices, which
// encoding/json would expand field by field) is redacted because its content
// cannot be vetted. Free-form audit attrs should be scalars or groups.
func redactAttr(a slog.Attr) slog.Attr {
	if IsSecretKey(a.Key) {
		return slog.String(a.Key, Redacted)
	}
	a.Value = a.Value.Resolve()
	switch a.Value.Kind() {
	case slog.KindGroup:
		g := a.Value.Group()
		out := make([]slog.Attr, len(g))
		for i, c := range g {
			out[i] = redactAttr(c)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case Secret, *Secret, []byte:
			return slog.String(a.Key, Redacted)
		case error:
			return slog.String(a.Key, v.Error())
		case fmt.Stringer:
			return slog.String(a.Key, v.String())
		default:
			return slog.String(a.Key, Redacted)
		}
	}
	return a
}

func (l *Logger) emit(event, msg string, attrs ...slog.Attr) {
	if l == nil || l.h == nil {
		return
	}
	r := slog.NewRecord(l.now(), slog.LevelInfo, msg, 0)
	r.AddAttrs(slog.String("event", event))
	for _, a := range attrs {
		r.AddAttrs(redactAttr(a))
	}
	if err := l.h.Handle(context.Background(), r); err != nil {
		l.writeErrors.Add(1)
	}
}

// AuthFailure records a failed authentication. tenant is the claimed tenant
// (may be empty if unknown), reason a short code such as "bad_token" or
// "unknown_tenant", remote the peer address. Never pass the presented
// credential. Every call is counted; it is written only while remote's
// source is within its Throttle, and otherwise summarized.
func (l *Logger) AuthFailure(tenant, reason, remote string) {
	if l == nil {
		return
	}
	l.authFailures.Add(1)
	if l.h == nil {
		return
	}
	write, sums := l.thr.admit(SourceOf(remote), l.now())
	l.summarize(sums)
	if !write {
		l.suppressed.Add(1)
		return
	}
	l.emit(EventAuthFailure, "authentication failed",
		slog.String("tenant", tenant), slog.String("reason", reason), slog.String("remote", remote))
}

// Denied records an ACL denial of op (e.g. "GET", "LOOKUP") needing right
// (e.g. "read") on model.
func (l *Logger) Denied(tenant, model, right, op string) {
	l.emit(EventDenied, "access denied",
		slog.String("tenant", tenant), slog.String("model", model),
		slog.String("right", right), slog.String("op", op))
}

// RateLimited records a request refused for exceeding tenant's quota.
func (l *Logger) RateLimited(tenant string, retryAfter time.Duration) {
	l.emit(EventRateLimited, "rate limited",
		slog.String("tenant", tenant),
		slog.Int64("retry_after_ms", retryAfter.Milliseconds()),
		slog.String("retry_after", retryAfter.String()))
}

// Rotation records a key or secret rotation. kind names what rotated (e.g.
// "seal_key", "tenant_secret"); keyID is the new key's public identifier.
// Never pass key material or a fingerprint as keyID.
func (l *Logger) Rotation(kind, keyID string) {
	l.emit(EventRotation, "rotation",
		slog.String("kind", kind), slog.String("key_id", keyID))
}

// AdminAction records an administrative action by actor. Extra attrs are
// filtered: secret-looking keys and Secret or []byte values are redacted.
func (l *Logger) AdminAction(actor, action string, attrs ...slog.Attr) {
	base := []slog.Attr{slog.String("actor", actor), slog.String("action", action)}
	if len(attrs) > 0 {
		base = append(base, slog.Attr{Key: "details", Value: slog.GroupValue(attrs...)})
	}
	l.emit(EventAdminAction, "admin action", base...)
}

// Integrity records a cold-tier integrity failure: a refill miss caused by
// corruption or tampering (a manifest seal missing or not verifying, a
// payload checksum mismatch, a corrupt manifest or pointer). kind is a
// short code such as "seal_invalid" (refill.IntegrityEvent.Kind);
// namespace is the namespace digest in hex, key the block key in hex;
// keyID is the seal key id the manifest names ("" if none), a public
// identifier; reason is the error text. None of them is secret, so none is
// redacted: never pass key material, a MAC or a credential here.
func (l *Logger) Integrity(kind, namespace, key, keyID, reason string) {
	l.emit(EventIntegrity, "cold-tier integrity failure",
		slog.String("kind", kind), slog.String("namespace", namespace),
		slog.String("block", key), slog.String("key_id", keyID),
		slog.String("reason", reason))
}
