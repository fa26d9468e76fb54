package certs

import (
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// t0 is the fixed "now" of the tests.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is the settable test clock.
type fakeClock = testkit.Clock

func newFakeClock(t time.Time) *fakeClock { return testkit.NewClock(t) }

// testCA returns a freshly made ECDSA CA, parsed as Load would.
func testCA(t testing.TB) *tls.Certificate {
	t.Helper()
	return testCAAt(t, t0)
}

// testCAAt returns a CA made at now; handshake tests need the wall clock
// because the TLS client verifies against it.
func testCAAt(t testing.TB, now time.Time) *tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := newCA(now)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := parseCA(certPEM, keyPEM, "ca.pem", "ca-key.pem", now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// selfSigned makes a self-signed certificate for key, adjusted by mod, and
// returns it PEM-encoded.
func selfSigned(t testing.TB, key crypto.Signer, mod func(*x509.Certificate)) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(42),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             t0.Add(-time.Hour),
		NotAfter:              t0.Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	if mod != nil {
		mod(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// pkcs8PEM encodes key as a PKCS#8 PEM block.
func pkcs8PEM(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// writeFile writes data to dir/name with mode and returns the path.
func writeFile(t testing.TB, dir, name string, data []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// caPool returns a pool holding only ca's certificate.
func caPool(ca *tls.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)
	return pool
}
