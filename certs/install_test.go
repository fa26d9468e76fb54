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

// TestInstallPairCopiesAMatchingPair: the certificate and key are copied
// together (0444 and 0400) and load; a key of another CA is refused and
// nothing is written.
func TestInstallPairCopiesAMatchingPair(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath, err := Init(filepath.Join(dir, "ca"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.MkdirAll(out, 0o700); err != nil {
		t.Fatal(err)
	}
	certTo, keyTo := filepath.Join(out, "ca.pem"), filepath.Join(out, "ca-key.pem")
	if err := InstallPair(certPath, keyPath, certTo, keyTo, time.Now); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{certTo: 0o444, keyTo: 0o400} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v, want mode %v", path, err, want)
		}
	}
	if _, err := Load(certTo, keyTo, time.Now); err != nil {
		t.Fatalf("Load of the installed pair: %v", err)
	}

	_, otherKey, err := Init(filepath.Join(dir, "other"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	mixed := filepath.Join(dir, "mixed")
	if err := os.MkdirAll(mixed, 0o700); err != nil {
		t.Fatal(err)
	}
	err = InstallPair(certPath, otherKey, filepath.Join(mixed, "ca.pem"), filepath.Join(mixed, "ca-key.pem"), time.Now)
	if !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("mismatched pair: %v, want ErrKeyMismatch", err)
	}
	if left, _ := os.ReadDir(mixed); len(left) != 0 {
		t.Fatalf("a refused pair left files: %v", left)
	}
}
