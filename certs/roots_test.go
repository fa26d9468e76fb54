package certs

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestRoots(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "roots.pem")
	ca := testCA(t)
	if err := os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	pool, err := Roots(good)
	if err != nil {
		t.Fatalf("Roots(good): %v", err)
	}
	if _, err := ca.Leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0}); err != nil {
		t.Errorf("the file's certificate is not in the pool: %v", err)
	}
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not pem\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Roots(junk); !errors.Is(err, ErrNoRoots) {
		t.Errorf("Roots(junk) = %v, want ErrNoRoots", err)
	}
	if _, err := Roots(filepath.Join(dir, "missing.pem")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Roots(missing) = %v, want fs.ErrNotExist", err)
	}
}
