package certs

import (
	"fmt"
	"os"
	"path/filepath"
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
	dir := filepath.Dir(to)
	tmp, err := os.CreateTemp(dir, ".ca-key-*.tmp")
	if err != nil {
		return fmt.Errorf("install CA key: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if err := tmp.Chmod(0o400); err != nil {
		tmp.Close()
		return fmt.Errorf("install CA key: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("install CA key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install CA key: %w", err)
	}
	if err := os.Rename(tmp.Name(), to); err != nil {
		return fmt.Errorf("install CA key: %w", err)
	}
	return nil
}
