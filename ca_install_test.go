package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCAInstallKeyPair: the chart's key copier copies the certificate with
// the key when given --cert-from/--cert-to, and both must come together.
func TestCAInstallKeyPair(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runCLI(t, "ca", "init", "--out", filepath.Join(dir, "ca")); code != 0 {
		t.Fatalf("ca init: %s", errOut)
	}
	cert, key := filepath.Join(dir, "ca", "ca.pem"), filepath.Join(dir, "ca", "ca-key.pem")
	certTo, keyTo := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if code, _, _ := runCLI(t, "ca", "install-key", "--from", key, "--to", keyTo, "--cert-from", cert); code != 2 {
		t.Errorf("--cert-from without --cert-to: exit %d, want 2", code)
	}
	code, _, errOut := runCLI(t, "ca", "install-key", "--from", key, "--to", keyTo, "--cert-from", cert, "--cert-to", certTo)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want, _ := os.ReadFile(cert)
	if got, err := os.ReadFile(certTo); err != nil || string(got) != string(want) {
		t.Fatalf("certificate copy: %v", err)
	}
}
