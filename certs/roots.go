package certs

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ErrNoRoots: an extra-roots file (upstream_ca) holds no PEM certificate.
var ErrNoRoots = errors.New("no PEM certificates found")

// Roots returns the system roots plus every PEM certificate in path: what
// upstream TLS (and a rediss:// shared state) is verified against when
// [sidecar] upstream_ca is set. A file that cannot be read, or holds no
// certificate, is an error: trusting only the system roots instead would
// fail every request to the internal registry the file was meant for.
func Roots(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoRoots)
	}
	return pool, nil
}
