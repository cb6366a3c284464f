package tlsconf

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package that concerns the
// content of a file is a *FileError, and errors.Is reports which of these
// kinds of problem it is. A file that cannot be read wraps the error from the
// operating system instead (errors.Is(err, fs.ErrNotExist) and so on).
var (
	// ErrConfig: the Files or ClientFiles value itself is incomplete or
	// inconsistent (a required path is empty, a certificate without a key).
	ErrConfig = errors.New("gpucache/tlsconf: invalid configuration")
	// ErrNoPEM: the file holds no PEM block of the expected type (empty,
	// DER-encoded, garbage, or the wrong kind of file).
	ErrNoPEM = errors.New("gpucache/tlsconf: no usable PEM block")
	// ErrMalformed: a PEM block of the right type does not parse.
	ErrMalformed = errors.New("gpucache/tlsconf: malformed PEM content")
	// ErrKeyMismatch: the private key is not the key of the certificate.
	ErrKeyMismatch = errors.New("gpucache/tlsconf: private key does not match certificate")
	// ErrExpired: a certificate's NotAfter is in the past.
	ErrExpired = errors.New("gpucache/tlsconf: certificate expired")
	// ErrNotYetValid: a certificate's NotBefore is in the future.
	ErrNotYetValid = errors.New("gpucache/tlsconf: certificate not yet valid")
	// ErrUnsuitable: the material parses but cannot serve its role (wrong
	// extended key usage, no SANs on a server certificate, a leaf in a CA
	// bundle, a misordered chain, an encrypted or unsupported key, ...).
	ErrUnsuitable = errors.New("gpucache/tlsconf: unsuitable for its role")
)

// FileError reports a problem with one named file.
type FileError struct {
	// Role says what the file is for, e.g. "server certificate",
	// "server key", "client CA bundle".
	Role string
	// Path is the file name as configured.
	Path string
	// Err describes the problem; it wraps one of the sentinel errors above
	// or the operating system's error.
	Err error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("gpucache/tlsconf: %s file %q: %v", e.Role, e.Path, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// problem is an operator-facing message that also matches a sentinel.
type problem struct {
	kind error
	msg  string
}

func (p *problem) Error() string { return p.msg }
func (p *problem) Unwrap() error { return p.kind }

func newProblem(kind error, format string, args ...any) error {
	return &problem{kind: kind, msg: fmt.Sprintf(format, args...)}
}

func configError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}
