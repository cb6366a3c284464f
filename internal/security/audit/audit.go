package audit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
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
)

// Logger emits audit events. A nil *Logger discards events.
type Logger struct {
	l *slog.Logger
}

// Options tunes a Logger. The zero value is valid.
type Options struct {
	// Now overrides the timestamp source (tests); default time.Now.
	Now func() time.Time
}

// New returns a Logger writing JSON lines to w, the dedicated audit sink.
func New(w io.Writer) *Logger { return NewWithOptions(w, Options{}) }

// NewWithOptions is New with options.
func NewWithOptions(w io.Writer, o Options) *Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey && o.Now != nil {
				return slog.Time(slog.TimeKey, o.Now())
			}
			return redactAttr(a)
		},
	})
	return &Logger{l: slog.New(h).With(slog.Bool("audit", true))}
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
	if l == nil {
		return
	}
	all := make([]slog.Attr, 0, len(attrs)+1)
	all = append(all, slog.String("event", event))
	for _, a := range attrs {
		all = append(all, redactAttr(a))
	}
	l.l.LogAttrs(context.Background(), slog.LevelInfo, msg, all...)
}

// AuthFailure records a failed authentication. tenant is the claimed tenant
// (may be empty if unknown), reason a short code such as "bad_token" or
// "unknown_tenant", remote the peer address. Never pass the presented
// credential.
func (l *Logger) AuthFailure(tenant, reason, remote string) {
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
