package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchConfigMapSwap reproduces how the kubelet updates a mounted
// ConfigMap: config.toml → ..data/config.toml, ..data → ..<timestamp>, and an
// update swaps the ..data symlink atomically. The watcher must notice.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mkVersion := func(name, text string) {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "config.toml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mkVersion("..v1", "[circuit_breaker]\nfailure_threshold = 3\n")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.toml")
	if err := os.Symlink("..data/config.toml", path); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	changed := make(chan struct{}, 4)
	if err := Watch(ctx, path, func() { changed <- struct{}{} }, func(err error) { t.Error(err) }); err != nil {
		t.Fatal(err)
	}
	mkVersion("..v2", "[circuit_breaker]\nfailure_threshold = 9\n")
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink("..v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the ..data symlink swap was not noticed")
	}
}

func TestWatchIgnoresOtherFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte("# v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	changed := make(chan struct{}, 4)
	if err := Watch(ctx, path, func() { changed <- struct{}{} }, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Then a real change: the first event seen must be for it.
	if err := os.WriteFile(path+".new", []byte("# version two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("rename over the config file was not noticed")
	}
	if len(changed) != 0 {
		t.Fatalf("%d extra change notifications", len(changed))
	}
}

// TestWatchFollowsASymlinkIntoAnotherDirectory: the config file is a
// symlink to a file kept elsewhere (/etc/nora/config.toml →
// /srv/nora/current.toml, as configuration management lays it out). A
// change of that file by the usual rename-over is a change of the
// configuration; on main only the link's own directory was watched and
// the change went unnoticed. Then the link is pointed at a file in a third
// directory, and a change there is followed too.
func TestWatchFollowsASymlinkIntoAnotherDirectory(t *testing.T) {
	etc, srv, next := t.TempDir(), t.TempDir(), t.TempDir()
	current := filepath.Join(srv, "current.toml")
	writeConfigFile(t, current, 3)
	path := filepath.Join(etc, "config.toml")
	if err := os.Symlink(current, path); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	changed := make(chan struct{}, 8)
	if err := Watch(ctx, path, func() { changed <- struct{}{} }, func(err error) { t.Error(err) }); err != nil {
		t.Fatal(err)
	}
	waitChange := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s was not noticed", what)
		}
	}
	replaceConfigFile(t, current, 9)
	waitChange("a change of the file the config symlink names")

	moved := filepath.Join(next, "current.toml")
	writeConfigFile(t, moved, 4)
	if err := os.Symlink(moved, path+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	waitChange("the symlink moved to another directory's file")
	replaceConfigFile(t, moved, 5)
	waitChange("a change of the file the moved symlink names")
}

func writeConfigFile(t *testing.T, path string, threshold int) {
	t.Helper()
	body := fmt.Sprintf("[circuit_breaker]\nfailure_threshold = %d\n", threshold)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceConfigFile rewrites path as editors and deploy tools do: a new
// file renamed over the old one.
func replaceConfigFile(t *testing.T, path string, threshold int) {
	t.Helper()
	writeConfigFile(t, path+".new", threshold)
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}
