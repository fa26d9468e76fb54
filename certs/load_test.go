package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mustECKey(t testing.TB, c elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestLoad(t *testing.T) {
	key := mustECKey(t, elliptic.P256())
	caPEM := selfSigned(t, key, nil)
	otherKey := mustECKey(t, elliptic.P256())
	p384 := mustECKey(t, elliptic.P384())
	p521 := mustECKey(t, elliptic.P521())
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	sec1, _ := x509.MarshalECPrivateKey(key)
	sec1PEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})
	pkcs1PEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})
	leaf, err := signLeaf(testCA(t), "registry.example", t0)
	if err != nil {
		t.Fatal(err)
	}
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]})

	tests := []struct {
		name      string
		cert, key []byte
		keyMode   os.FileMode
		now       time.Time
		wantErr   error
		wantMsg   []string // substrings of the error; "$KEY"/"$CERT" stand for the paths
	}{
		{name: "ecdsa p256 pkcs8", cert: caPEM, key: pkcs8PEM(t, key), keyMode: 0o600},
		{name: "read-only key", cert: caPEM, key: pkcs8PEM(t, key), keyMode: 0o400},
		{name: "sec1 key", cert: caPEM, key: sec1PEM, keyMode: 0o600},
		{name: "ecdsa p384", cert: selfSigned(t, p384, nil), key: pkcs8PEM(t, p384), keyMode: 0o600},
		{name: "rsa pkcs1", cert: selfSigned(t, rsaKey, nil), key: pkcs1PEM, keyMode: 0o600},
		{name: "key 0644", cert: caPEM, key: pkcs8PEM(t, key), keyMode: 0o644,
			wantErr: ErrKeyPermissions, wantMsg: []string{"$KEY", "0644", "chmod 600 $KEY"}},
		{name: "key 0640", cert: caPEM, key: pkcs8PEM(t, key), keyMode: 0o640,
			// The group read an fsGroup adds: the hint must name the fix that
			// works there, not a Secret defaultMode the kubelet widens.
			wantErr: ErrKeyPermissions, wantMsg: []string{"0640", "nora-breaker ca install-key", "fsGroup"}},
		{name: "key 0602", cert: caPEM, key: pkcs8PEM(t, key), keyMode: 0o602,
			wantErr: ErrKeyPermissions, wantMsg: []string{"0602"}},
		{name: "mismatched pair", cert: caPEM, key: pkcs8PEM(t, otherKey), keyMode: 0o600,
			wantErr: ErrKeyMismatch, wantMsg: []string{"$KEY is not the key of $CERT"}},
		{name: "non-CA cert", cert: leafPEM, key: pkcs8PEM(t, leaf.PrivateKey.(crypto.Signer)), keyMode: 0o600,
			wantErr: ErrNotCA, wantMsg: []string{"$CERT", "CA:TRUE"}},
		{name: "CA without certSign", cert: selfSigned(t, key, func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageDigitalSignature }),
			key: pkcs8PEM(t, key), keyMode: 0o600, wantErr: ErrNotCA, wantMsg: []string{"keyCertSign"}},
		{name: "garbage cert", cert: []byte("not a certificate\n"), key: pkcs8PEM(t, key), keyMode: 0o600,
			wantErr: ErrBadPEM, wantMsg: []string{"$CERT holds no PEM CERTIFICATE block"}},
		{name: "corrupt cert", cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}), key: pkcs8PEM(t, key),
			keyMode: 0o600, wantErr: ErrBadPEM, wantMsg: []string{"$CERT: parse certificate"}},
		{name: "garbage key", cert: caPEM, key: []byte("-----BEGIN NOTHING-----\n"), keyMode: 0o600,
			wantErr: ErrBadPEM, wantMsg: []string{"$KEY holds no PEM PRIVATE KEY block"}},
		{name: "corrupt key", cert: caPEM, key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("junk")}),
			keyMode: 0o600, wantErr: ErrBadPEM, wantMsg: []string{"$KEY: parse PRIVATE KEY"}},
		{name: "encrypted key", cert: caPEM, key: pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte("x")}),
			keyMode: 0o600, wantErr: ErrUnsupportedKey, wantMsg: []string{"encrypted"}},
		{name: "p521", cert: selfSigned(t, p521, nil), key: pkcs8PEM(t, p521), keyMode: 0o600,
			wantErr: ErrUnsupportedKey, wantMsg: []string{"P-521"}},
		{name: "ed25519", cert: selfSigned(t, edKey, nil), key: pkcs8PEM(t, edKey), keyMode: 0o600,
			wantErr: ErrUnsupportedKey, wantMsg: []string{"ed25519"}},
		{name: "expired", cert: caPEM, key: pkcs8PEM(t, key), keyMode: 0o600, now: t0.Add(366 * 24 * time.Hour),
			wantErr: ErrExpired, wantMsg: []string{"$CERT expired on"}},
		{name: "not yet valid", cert: caPEM, key: pkcs8PEM(t, key), keyMode: 0o600, now: t0.Add(-2 * time.Hour),
			wantErr: ErrExpired, wantMsg: []string{"not valid before"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			certPath := writeFile(t, dir, "ca.pem", tt.cert, 0o644)
			keyPath := writeFile(t, dir, "ca-key.pem", tt.key, tt.keyMode)
			now := tt.now
			if now.IsZero() {
				now = t0
			}
			ca, err := Load(certPath, keyPath, func() time.Time { return now })
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if ca.Leaf == nil || len(ca.Certificate) != 1 || ca.PrivateKey == nil {
					t.Fatalf("incomplete certificate: %+v", ca)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			for _, m := range tt.wantMsg {
				m = strings.NewReplacer("$KEY", keyPath, "$CERT", certPath).Replace(m)
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q lacks %q", err, m)
				}
			}
		})
	}
}

func TestLoadMissingFiles(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"), time.Now)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want not-exist", err)
	}
}

func TestLoadFollowsSymlinkedKey(t *testing.T) {
	// Kubernetes mounts secrets as symlinks; the mode that counts is the target's.
	dir := t.TempDir()
	certPath, keyPath, err := Init(dir, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link-key.pem")
	if err := os.Symlink(keyPath, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(certPath, link, func() time.Time { return t0 }); err != nil {
		t.Fatalf("Load via symlink: %v", err)
	}
	if err := os.Chmod(keyPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(certPath, link, func() time.Time { return t0 }); !errors.Is(err, ErrKeyPermissions) {
		t.Fatalf("err = %v, want ErrKeyPermissions for a 0644 target", err)
	}
}

// FuzzParseCA feeds arbitrary bytes to the PEM and DER parsers: they must
// return an error, never panic, and never accept a pair that fails the checks.
func FuzzParseCA(f *testing.F) {
	certPEM, keyPEM, err := newCA(t0)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(certPEM, keyPEM)
	f.Add([]byte("garbage"), keyPEM)
	f.Add(certPEM, []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), []byte{})
	f.Fuzz(func(t *testing.T, certData, keyData []byte) {
		ca, err := parseCA(certData, keyData, "c", "k", t0)
		if err != nil {
			return
		}
		if ca.Leaf == nil || !ca.Leaf.IsCA {
			t.Fatalf("accepted a non-CA: %+v", ca.Leaf)
		}
		if _, err := signLeaf(ca, "fuzz.example", t0); err != nil {
			t.Fatalf("accepted CA cannot sign: %v", err)
		}
	})
}
