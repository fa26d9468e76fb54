package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// File names written by Init and expected by the chart and the README.
const (
	CertFileName = "ca.pem"
	KeyFileName  = "ca-key.pem"
)

// caCommonName is the subject clients show when they complain about the CA,
// so it says plainly what the certificate is for.
const caCommonName = "nora-breaker interception CA"

// caValidity is long because rotating a CA means touching every client's
// trust store; the key never leaves the proxy's disk.
const caValidity = 10 * 365 * 24 * time.Hour

// clockSkew backdates NotBefore so that a client whose clock runs a little
// behind the proxy's still accepts a freshly made certificate.
const clockSkew = time.Hour

// Init creates an ECDSA P-256 CA in dir: ca.pem (0644) and ca-key.pem (0600).
// It creates dir (0755) when missing and refuses to overwrite either file, so
// running `ca init` twice can never silently replace a CA that clients
// already trust. It returns the paths of the two files.
func Init(dir string, now func() time.Time) (certPath, keyPath string, err error) {
	certPath = filepath.Join(dir, CertFileName)
	keyPath = filepath.Join(dir, KeyFileName)
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Lstat(p); err == nil {
			return "", "", fmt.Errorf("ca init: %s already exists; refusing to overwrite it (move it away to create a new CA)", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", "", fmt.Errorf("ca init: %w", err)
		}
	}
	certPEM, keyPEM, err := newCA(now())
	if err != nil {
		return "", "", fmt.Errorf("ca init: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("ca init: create %s: %w", dir, err)
	}
	// The key goes first so that a failure never leaves a certificate
	// behind whose key is lost.
	if err := writeNew(keyPath, keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("ca init: %w", err)
	}
	if err := writeNew(certPath, certPEM, 0o644); err != nil {
		_ = os.Remove(keyPath)
		return "", "", fmt.Errorf("ca init: %w", err)
	}
	return certPath, keyPath, nil
}

// newCA returns the PEM encodings of a fresh self-signed CA and its key.
func newCA(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: caCommonName, Organization: []string{"nora-breaker"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		// Path length zero: this CA signs leaves only, never another CA,
		// which limits the damage should its key ever leak.
		MaxPathLen:     0,
		MaxPathLenZero: true,
		KeyUsage:       x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, nil
}

// randomSerial returns a positive 128-bit serial number; RFC 5280 asks for
// at most 20 octets and browsers dislike repeated issuer/serial pairs.
func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil
}

// writeNew writes data to a file that must not exist yet and sets its mode
// exactly, regardless of the umask.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}
