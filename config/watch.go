package config

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch calls onChange after the config file at path changes, until ctx
// ends. It watches the file's directory rather than the file, because editors
// replace files by renaming and Kubernetes updates a mounted ConfigMap by
// swapping a "..data" symlink: both leave a watch on the old inode silent.
// When the path is a symlink to a file in another directory (a link kept
// by configuration management), that directory is watched too, and the
// file the link names is followed as the link moves.
// Bursts of events are folded into one call after a short quiet period, and
// a change is only reported when the file's resolved target or content
// identity (size, modification time) actually moved.
func Watch(ctx context.Context, path string, onChange func(), onError func(error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		w.Close()
		return err
	}
	// Taken before returning, so a change made right after Watch returns is
	// a change.
	last := fileIdentity(path)
	follow := func(target string) {
		if target == "" || filepath.Dir(target) == dir {
			return
		}
		if err := w.Add(filepath.Dir(target)); err != nil && onError != nil {
			onError(err)
		}
	}
	follow(last.target)
	go func() {
		defer w.Close()
		var debounce <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if relevant(ev, path, last.target) {
					debounce = time.After(200 * time.Millisecond)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				if onError != nil {
					onError(err)
				}
			case <-debounce:
				debounce = nil
				if id := fileIdentity(path); id != last {
					if id.target != last.target {
						follow(id.target)
					}
					last = id
					onChange()
				}
			}
		}
	}()
	return nil
}

// relevant keeps events about the config file itself, about the file it
// resolves to (target, "" when it resolves to nothing), or about the
// Kubernetes "..data" symlink that points at the current ConfigMap version.
func relevant(ev fsnotify.Event, path, target string) bool {
	name := filepath.Clean(ev.Name)
	return name == filepath.Clean(path) || (target != "" && name == target) || filepath.Base(name) == "..data"
}

// identity is what must change for a reload to be worth it.
type identity struct {
	target  string
	size    int64
	modTime time.Time
}

func fileIdentity(path string) identity {
	target, _ := filepath.EvalSymlinks(path)
	st, err := os.Stat(path)
	if err != nil {
		return identity{target: target}
	}
	return identity{target: target, size: st.Size(), modTime: st.ModTime()}
}
