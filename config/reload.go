package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// ErrEmptyReload refuses a reload that reads an empty config file: what a
// truncating writer leaves for a moment, never what an operator meant (the
// proxy would run on defaults, breakers disabled, the configured upstreams
// gone).
var ErrEmptyReload = errors.New("the config file is empty")

// ErrUpstreamsGone refuses a reload whose file names none of the upstreams
// the running configuration has, while the running one's file named some:
// a half-written or wrong file, more likely than an operator removing every
// upstream at once (a restart does that).
var ErrUpstreamsGone = errors.New("the config file names none of the upstreams in force")

// ReloadOptions say how Reload reads the file.
type ReloadOptions struct {
	Options
	// Settle is how long Reload waits between two reads of the file; 0
	// means 100 ms. Attempts bounds how many reads it makes for two to
	// agree; 0 means 10.
	Settle   time.Duration
	Attempts int
}

// Reload loads the configuration a reload would put in force instead of
// current (docs/behaviour.md §2.3). It reads the file until two reads a
// settle apart agree, so a writer caught mid-write is waited out, then
// loads from that one text; and it refuses, besides what Load refuses, an
// empty file and a file naming none of current's upstreams where current's
// file named some.
func Reload(o ReloadOptions, current *Config) (*Config, error) {
	settle, attempts := o.Settle, o.Attempts
	if settle <= 0 {
		settle = 100 * time.Millisecond
	}
	if attempts <= 0 {
		attempts = 10
	}
	read := o.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	path := current.Path
	if path == "" {
		return Load(o.Options) // no file: the environment and flags alone
	}
	text, err := stableRead(read, path, settle, attempts)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(text)) == 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrEmptyReload)
	}
	opts := o.Options
	opts.ReadFile = func(p string) ([]byte, error) {
		if p == path {
			return text, nil
		}
		return read(p)
	}
	cfg, err := Load(opts)
	if err != nil {
		return nil, err
	}
	if gone := upstreamsGone(current, cfg); gone != "" {
		return nil, fmt.Errorf("%s: %w (in force: %s)", path, ErrUpstreamsGone, gone)
	}
	return cfg, nil
}

// stableRead reads path until two consecutive reads, settle apart, agree.
func stableRead(read func(string) ([]byte, error), path string, settle time.Duration, attempts int) ([]byte, error) {
	prev, err := read(path)
	if err != nil {
		return nil, err
	}
	for range attempts {
		time.Sleep(settle)
		next, err := read(path)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(prev, next) {
			return next, nil
		}
		prev = next
	}
	return nil, fmt.Errorf("%s: still changing after %d reads %v apart", path, attempts, settle)
}

// upstreamsGone names current's upstreams from its file when next keeps
// none of them ("" when next keeps one, or current's file named none).
func upstreamsGone(current, next *Config) string {
	kept := make(map[string]bool, len(next.Upstreams))
	for _, u := range next.Upstreams {
		kept[u.Key] = true
	}
	var fromFile []string
	for _, u := range current.Upstreams {
		if !strings.HasPrefix(u.Source, "file") {
			continue
		}
		if kept[u.Key] {
			return ""
		}
		fromFile = append(fromFile, u.Key)
	}
	return strings.Join(fromFile, ", ")
}
