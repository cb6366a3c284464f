package tlsconf

import (
	"crypto/tls"
	"slices"
)

// PeerNames returns the names of the verified peer leaf certificate of a
// completed handshake: its Subject CommonName, then its DNS SANs, then its
// URI SANs (as strings), without empty strings or duplicates. On the server
// side this is the client certificate. It returns nil when the handshake is
// not complete or no certificate was verified; certificates that were
// presented but not verified (PeerCertificates without VerifiedChains) are
// never trusted for names.
func PeerNames(cs tls.ConnectionState) []string {
	if !cs.HandshakeComplete || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	leaf := cs.VerifiedChains[0][0]
	var names []string
	add := func(n string) {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	add(leaf.Subject.CommonName)
	for _, n := range leaf.DNSNames {
		add(n)
	}
	for _, u := range leaf.URIs {
		add(u.String())
	}
	return names
}
