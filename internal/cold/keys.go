package cold

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ValidKey reports whether key can be stored by every backend. It returns nil
// or an error wrapping ErrInvalidKey that names the rule the key breaks.
//
// A key is a "/"-separated path of one or more segments:
//   - 1 to MaxKeyLen bytes of valid UTF-8, with no control bytes (< 0x20, 0x7f);
//   - no leading or trailing "/", and no empty segment ("a//b");
//   - no "." or ".." segment.
//
// These are the rules the fs backend needs to map keys onto a directory tree
// without escaping it, and they keep keys portable to any S3 server. Backends
// may reject more (fs: a segment longer than the file system allows).
func ValidKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidKey, key)
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("%w: %q starts with /", ErrInvalidKey, key)
	case strings.HasSuffix(key, "/"):
		return fmt.Errorf("%w: %q ends with /", ErrInvalidKey, key)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: %q has control byte %#x", ErrInvalidKey, key, c)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w: %q has an empty segment", ErrInvalidKey, key)
		case ".", "..":
			return fmt.Errorf("%w: %q has a %q segment", ErrInvalidKey, key, seg)
		}
	}
	return nil
}

// ValidPrefix checks a List prefix: "" (everything) or any string that
// begins some valid key. It is looser than ValidKey: "ns/" and "ns/ob" are
// fine. The error wraps ErrInvalidKey.
func ValidPrefix(prefix string) error {
	if prefix == "" || ValidKey(prefix) == nil {
		return nil
	}
	// A prefix that ends right after a "/" or inside a segment is valid if
	// one more byte completes it to a valid key.
	if err := ValidKey(prefix + "x"); err != nil {
		return fmt.Errorf("list prefix: %w", err)
	}
	return nil
}
