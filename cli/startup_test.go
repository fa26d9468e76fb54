package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/config"
)

// TestCheckStaleDir: what opening the stale cache needs, asked without
// creating anything.
func TestCheckStaleDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, err string
	}{
		{"off", "", ""},
		{"existing directory", dir, ""},
		{"missing, parent exists", filepath.Join(dir, "stale"), ""},
		{"missing several levels down", filepath.Join(dir, "a", "b", "stale"), ""},
		{"a file", file, "is not a directory"},
		{"below a file", filepath.Join(file, "stale"), "cannot create " + filepath.Join(file, "stale") + ": " + file + " is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkStaleDir(config.Sidecar{StaleDir: tc.path}, time.Now)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Error("the check created a directory")
	}
}
