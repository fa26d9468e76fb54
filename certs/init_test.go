package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestInitWritesCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub", "ca")
	certPath, keyPath, err := Init(dir, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	if certPath != filepath.Join(dir, "ca.pem") || keyPath != filepath.Join(dir, "ca-key.pem") {
		t.Fatalf("paths = %s, %s", certPath, keyPath)
	}
	for path, want := range map[string]os.FileMode{dir: 0o755, certPath: 0o644, keyPath: 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode = %#o, want %#o", path, got, want)
		}
	}

	data, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("ca.pem is not a PEM certificate: %q", data)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "nora-breaker interception CA" {
		t.Errorf("CN = %q", cert.Subject.CommonName)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.MaxPathLen != 0 || !cert.MaxPathLenZero {
		t.Errorf("basic constraints: IsCA=%v valid=%v maxPathLen=%d zero=%v",
			cert.IsCA, cert.BasicConstraintsValid, cert.MaxPathLen, cert.MaxPathLenZero)
	}
	if cert.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("key usage = %v", cert.KeyUsage)
	}
	if years := cert.NotAfter.Sub(t0).Hours() / 24 / 365; years < 9.9 || years > 10.1 {
		t.Errorf("validity = %.2f years, want 10", years)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key = %T, want ECDSA P-256", cert.PublicKey)
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		t.Errorf("not self-signed: %v", err)
	}

	ca, err := Load(certPath, keyPath, func() time.Time { return t0 })
	if err != nil {
		t.Fatalf("Load after Init: %v", err)
	}
	if !ca.Leaf.Equal(cert) {
		t.Error("Load returned a different certificate")
	}
}

func TestInitRefusesOverwrite(t *testing.T) {
	tests := []struct {
		name     string
		existing string
	}{
		{"cert exists", "ca.pem"},
		{"key exists", "ca-key.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := writeFile(t, dir, tt.existing, []byte("keep me"), 0o600)
			_, _, err := Init(dir, func() time.Time { return t0 })
			if err == nil || !strings.Contains(err.Error(), "refusing to overwrite") || !strings.Contains(err.Error(), p) {
				t.Fatalf("err = %v, want a refusal naming %s", err, p)
			}
			if data, _ := os.ReadFile(p); string(data) != "keep me" {
				t.Errorf("%s was changed", p)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("dir holds %d files, want only the existing one", len(entries))
			}
		})
	}
}

func TestInitTwiceFails(t *testing.T) {
	dir := t.TempDir()
	now := func() time.Time { return t0 }
	if _, _, err := Init(dir, now); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if _, _, err := Init(dir, now); err == nil {
		t.Fatal("second Init succeeded")
	}
	after, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if string(before) != string(after) {
		t.Error("second Init replaced the key")
	}
}

func TestInitUnwritableDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	_, _, err := Init(dir, func() time.Time { return t0 })
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("err = %v, want permission error", err)
	}
}
