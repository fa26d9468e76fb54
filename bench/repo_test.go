package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFindRepo(t *testing.T) {
	root := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("repo/go.mod", "// the product\nmodule "+productModule+" // trailing comment\n\ngo 1.26.0\n")
	write("repo/bench/go.mod", "module "+productModule+"/bench\n")
	write("repo/bench/deep/x.txt", "")
	write("other/go.mod", "module example.com/modulex\n")
	write("quoted/go.mod", "module \""+productModule+"\"\n")
	for _, tc := range []struct{ from, want string }{
		{"repo", "repo"},
		{"repo/bench", "repo"},
		{"repo/bench/deep", "repo"},
		{"quoted", "quoted"},
	} {
		got, err := findRepo(filepath.Join(root, tc.from))
		if err != nil || got != filepath.Join(root, tc.want) {
			t.Errorf("findRepo(%s) = %q, %v; want %s", tc.from, got, err, tc.want)
		}
	}
	if got, err := findRepo(filepath.Join(root, "other")); err == nil {
		t.Errorf("findRepo(other) = %q, want an error (no product module above it)", got)
	}
}
