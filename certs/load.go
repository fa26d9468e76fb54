package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Sentinel errors returned (wrapped, with the file names) by Load, so callers
// can tell problems apart with errors.Is.
var (
	// ErrKeyPermissions: the key file is readable or writable by group or others.
	ErrKeyPermissions = errors.New("CA key file is accessible to group or others")
	// ErrBadPEM: a file holds no usable PEM block of the expected kind.
	ErrBadPEM = errors.New("no usable PEM data")
	// ErrNotCA: the certificate may not sign other certificates.
	ErrNotCA = errors.New("certificate is not a CA")
	// ErrKeyMismatch: the key does not belong to the certificate.
	ErrKeyMismatch = errors.New("private key does not match the certificate")
	// ErrUnsupportedKey: the CA key type or size is not one we sign with.
	ErrUnsupportedKey = errors.New("unsupported CA key")
	// ErrExpired: the certificate is outside its validity period.
	ErrExpired = errors.New("certificate is not valid now")
)

// minRSABits is the smallest RSA CA key accepted; clients reject less.
const minRSABits = 2048

// Load reads the CA pair for serving and returns it with Leaf set.
//
// It refuses a key file whose mode grants any access to group or others
// (the message names the file, its mode and the chmod that fixes it), a
// certificate that is not a CA, a key that does not match it, and a
// certificate that is expired or not yet valid. Accepted CA keys are ECDSA
// P-256 or P-384 and RSA of at least 2048 bits. An RSA CA is fine for
// performance: leaves are always ECDSA P-256 whatever the CA's type, so the
// CA key is only used for one signature per new host.
func Load(certPath, keyPath string, now func() time.Time) (*tls.Certificate, error) {
	if err := checkKeyMode(keyPath); err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	return parseCA(certPEM, keyPEM, certPath, keyPath, now())
}

// checkKeyMode enforces docs/behaviour.md §10: a CA key others can read lets them
// impersonate every intercepted registry, so the proxy refuses to start.
// os.Stat follows symlinks, which is what a Kubernetes secret mount needs.
func checkKeyMode(keyPath string) error {
	fi, err := os.Stat(keyPath)
	if err != nil {
		return fmt.Errorf("CA key: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		// A Secret volume cannot give an owner-only file once the pod has
		// an fsGroup (the kubelet adds group read), so the Kubernetes hint
		// points at the copy `ca install-key` makes, as the chart does.
		return fmt.Errorf("%w: %s has mode %#o (%s); run `chmod 600 %s` (in Kubernetes, copy the key out of its Secret "+
			"with `nora-breaker ca install-key` in an init container, as the Helm chart does: an fsGroup makes Secret files group-readable)",
			ErrKeyPermissions, keyPath, perm, perm, keyPath)
	}
	return nil
}

// parseCA turns the two PEM files into a serving certificate. It never
// touches the file system, so it can be fuzzed; the names only label errors.
func parseCA(certPEM, keyPEM []byte, certName, keyName string, now time.Time) (*tls.Certificate, error) {
	cert, err := parseCertPEM(certPEM, certName)
	if err != nil {
		return nil, err
	}
	key, err := parseKeyPEM(keyPEM, keyName)
	if err != nil {
		return nil, err
	}
	if err := checkCA(cert, certName, now); err != nil {
		return nil, err
	}
	if err := checkKey(key, keyName); err != nil {
		return nil, err
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%w: %s is not the key of %s", ErrKeyMismatch, keyName, certName)
	}
	return &tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, nil
}

// parseCertPEM returns the first CERTIFICATE block of data, parsed.
func parseCertPEM(data []byte, name string) (*x509.Certificate, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("%w: %s holds no PEM CERTIFICATE block", ErrBadPEM, name)
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: parse certificate: %w", ErrBadPEM, name, err)
		}
		return cert, nil
	}
}

// parseKeyPEM returns the first private key block of data, parsed. PKCS#8,
// PKCS#1 (RSA) and SEC 1 (EC) encodings are accepted: openssl, cfssl,
// cert-manager and Init each produce one of them.
func parseKeyPEM(data []byte, name string) (crypto.Signer, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("%w: %s holds no PEM PRIVATE KEY block", ErrBadPEM, name)
		}
		if !strings.HasSuffix(block.Type, "PRIVATE KEY") {
			continue
		}
		if block.Type == "ENCRYPTED PRIVATE KEY" || block.Headers["Proc-Type"] != "" {
			return nil, fmt.Errorf("%w: %s is encrypted; store it unencrypted with mode 0600 (openssl pkey -in %s -out ca-key.pem)",
				ErrUnsupportedKey, name, name)
		}
		var key any
		var err error
		switch block.Type {
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		default:
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: parse %s: %w", ErrBadPEM, name, block.Type, err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%w: %s holds a %T", ErrUnsupportedKey, name, key)
		}
		return signer, nil
	}
}

// checkCA makes sure cert may sign leaves and is valid at now.
func checkCA(cert *x509.Certificate, name string, now time.Time) error {
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return fmt.Errorf("%w: %s (subject %q) lacks basicConstraints CA:TRUE; create one with `nora-breaker ca init`",
			ErrNotCA, name, cert.Subject.String())
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("%w: %s (subject %q) lacks the keyCertSign key usage", ErrNotCA, name, cert.Subject.String())
	}
	if !now.Before(cert.NotAfter) {
		return fmt.Errorf("%w: %s expired on %s", ErrExpired, name, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(cert.NotBefore) {
		return fmt.Errorf("%w: %s is not valid before %s (check the clock)", ErrExpired, name, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// checkKey limits CA keys to those every client of a package registry can
// verify: ECDSA P-256/P-384 and RSA >= 2048 bits.
func checkKey(key crypto.Signer, name string) error {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Errorf("%w: %s is ECDSA on %s; use P-256 or P-384", ErrUnsupportedKey, name, k.Curve.Params().Name)
		}
	case *rsa.PrivateKey:
		if bits := k.N.BitLen(); bits < minRSABits {
			return fmt.Errorf("%w: %s is RSA-%d; use at least %d bits", ErrUnsupportedKey, name, bits, minRSABits)
		}
	default:
		return fmt.Errorf("%w: %s is a %T key; use ECDSA P-256 (nora-breaker ca init) or RSA", ErrUnsupportedKey, name, key)
	}
	return nil
}
