package certs

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// InstallKey copies the CA key at from to to as a file only its owner can
// read (0400), after checking that it parses as a private key. It exists for
// Kubernetes: a Secret volume's files are root's and gain group read under an
// fsGroup, which Load rightly refuses, so an init container running as the
// proxy's user copies the key into a memory-backed volume first. The copy is
// written to a temp file and renamed, so a reader never sees half a key.
func InstallKey(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("read CA key: %w", err)
	}
	if _, err := parseKeyPEM(data, from); err != nil {
		return err
	}
	return install(data, to, 0o400, ".ca-key-*.tmp")
}

// InstallPair copies a CA certificate (0444) and its key (0400) together,
// after checking, as Load does, that they are a valid pair at now. A Secret
// volume updates in place when the Secret changes (cert-manager renewing
// the CA), but an init container's copy of the key does not: a proxy that
// read the live certificate next to the copied key would, after its next
// restart, hold the new certificate and the old key. Copying both at once
// gives every container of the pod the pair as it was when the pod started.
func InstallPair(certFrom, keyFrom, certTo, keyTo string, now func() time.Time) error {
	certPEM, err := os.ReadFile(certFrom)
	if err != nil {
		return fmt.Errorf("read CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFrom)
	if err != nil {
		return fmt.Errorf("read CA key: %w", err)
	}
	if _, err := parseCA(certPEM, keyPEM, certFrom, keyFrom, now()); err != nil {
		return err
	}
	if err := install(keyPEM, keyTo, 0o400, ".ca-key-*.tmp"); err != nil {
		return err
	}
	return install(certPEM, certTo, 0o444, ".ca-cert-*.tmp")
}

// install writes data to to with mode perm through a temp file in the same
// directory and a rename.
func install(data []byte, to string, perm os.FileMode, pattern string) error {
	tmp, err := os.CreateTemp(filepath.Dir(to), pattern)
	if err != nil {
		return fmt.Errorf("install %s: %w", to, err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("install %s: %w", to, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("install %s: %w", to, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install %s: %w", to, err)
	}
	if err := os.Rename(tmp.Name(), to); err != nil {
		return fmt.Errorf("install %s: %w", to, err)
	}
	return nil
}
