package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/config"
)

// Exit codes, documented in Usage. A script tells a miss from a refusal
// from an unreachable server by the code alone.
const (
	exitOK          = 0 // done; a GET hit
	exitMiss        = 1 // a GET (or DELETE) found no block
	exitUsage       = 2 // bad flags or arguments
	exitRefused     = 3 // the server refused: authentication (either way: a server certificate --tls-ca does not verify too), rights, quota, limits, capacity
	exitUnavailable = 4 // no answer: unreachable, timed out, not a data port, draining, read-only, or the key's owner is elsewhere
	exitFailed      = 5 // any other failure (a local file, a protocol error, a server bug)
)

var (
	// errMiss marks a miss (exit 1).
	errMiss = errors.New("miss")
	// errRefused marks a refusal the CLI recognised from a status (exit 3).
	errRefused = errors.New("refused")
	// errUnavailable marks an unavailable answer the CLI recognised (exit 4).
	errUnavailable = errors.New("unavailable")
)

// classify returns the exit code of a command's error and the word its
// message starts with ("" when the message needs none).
func classify(err error) (code int, label string) {
	switch {
	case errors.Is(err, ErrUsage):
		return exitUsage, ""
	case errors.Is(err, errMiss):
		return exitMiss, ""
	case errors.Is(err, errRefused):
		return exitRefused, ""
	case errors.Is(err, errUnavailable):
		return exitUnavailable, ""
	case errors.Is(err, ErrReported):
		return exitFailed, ""
	case untrustedCert(err):
		// The client refused the server's certificate: authentication
		// failed, as when the server refuses the client's.
		return exitRefused, "refused"
	}
	var we *wire.Error
	if errors.As(err, &we) {
		switch we.Code {
		case wire.CodeUnauthenticated, wire.CodeDenied, wire.CodeRateLimited, wire.CodeTenantMismatch,
			wire.CodeReplay, wire.CodeBatchTooLarge, wire.CodePayloadTooLarge, wire.CodeFrameTooLarge:
			return exitRefused, "refused"
		case wire.CodeShuttingDown, wire.CodeTimeout, wire.CodeWrongEpoch:
			return exitUnavailable, "unavailable"
		}
	}
	if errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrTimeout) || errors.Is(err, client.ErrClosed) ||
		errors.Is(err, client.ErrNotDataPort) {
		return exitUnavailable, "unavailable"
	}
	return exitFailed, ""
}

// untrustedCert reports whether err is a TLS handshake that failed because
// the client could not verify the server's certificate: signed by a CA
// that --tls-ca (--cacert) does not hold, issued for another name, or
// expired.
func untrustedCert(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		hn x509.HostnameError
		ci x509.CertificateInvalidError
	)
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci)
}

// reportErr prints err as one line for command cmd of program prog and
// returns its exit code.
func reportErr(std Stdio, prog, cmd string, err error) int {
	code, label := classify(err)
	if errors.Is(err, ErrReported) {
		return code
	}
	msg := OneLine(err)
	if label != "" && !strings.HasPrefix(msg, label) {
		msg = label + ": " + msg
	}
	if code == exitUsage {
		msg += fmt.Sprintf("; see '%s %s --help'", prog, cmd)
	}
	fmt.Fprintf(std.Err, "%s %s: %s\n", prog, cmd, msg)
	return code
}

// Nearest returns the candidate closest to s by edit distance, if it is
// close enough to be a likely typo.
func Nearest(s string, candidates []string) (string, bool) {
	best, bestD := "", len(s)/2+2
	for _, c := range candidates {
		if d := config.EditDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best, best != "" && bestD <= max(2, len(s)/3)
}
