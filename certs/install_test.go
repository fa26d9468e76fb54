package certs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestInstallKeyMakesAnOwnerOnlyCopyLoadAccepts(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath, err := Init(filepath.Join(dir, "ca"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	// What a Secret volume with an fsGroup looks like: group-readable.
	if err := os.Chmod(keyPath, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(certPath, keyPath, time.Now); !errors.Is(err, ErrKeyPermissions) {
		t.Fatalf("Load of a group-readable key: %v, want ErrKeyPermissions", err)
	}
	to := filepath.Join(dir, "copy", "ca-key.pem")
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := InstallKey(keyPath, to); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(to)
	if err != nil || st.Mode().Perm() != 0o400 {
		t.Fatalf("installed key: %v mode %v, want 0400", err, st.Mode().Perm())
	}
	if _, err := Load(certPath, to, time.Now); err != nil {
		t.Fatalf("Load of the installed copy: %v", err)
	}
	// Installing again over the read-only copy works (rename, not write).
	if err := InstallKey(keyPath, to); err != nil {
		t.Fatalf("second install: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "copy", ".ca-key-*"))
	if len(left) != 0 {
		t.Fatalf("temp files left behind: %v", left)
	}
}

func TestInstallKeyRefusesGarbage(t *testing.T) {
	dir := t.TempDir()
	from := filepath.Join(dir, "not-a-key.pem")
	if err := os.WriteFile(from, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(dir, "out.pem")
	if err := InstallKey(from, to); !errors.Is(err, ErrBadPEM) {
		t.Fatalf("got %v, want ErrBadPEM", err)
	}
	if _, err := os.Stat(to); !os.IsNotExist(err) {
		t.Fatal("a garbage key was installed")
	}
	if err := InstallKey(filepath.Join(dir, "missing"), to); err == nil {
		t.Fatal("a missing key was installed")
	}
}
