package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nora-breaker/nora-breaker/certs"
	"github.com/nora-breaker/nora-breaker/config"
)

// StartupCheck is one thing `serve` verifies before it listens, beyond what
// config.Load validates: the files the configuration names must be there and
// usable. `serve` and `check-config` both run StartupChecks through
// CheckStartup, so check-config passes exactly what serve accepts. Each
// check only reads; none creates or changes a file, so check-config is safe
// to run next to a running proxy (kubectl exec).
type StartupCheck struct {
	// Keys names the [sidecar] keys the check is about.
	Keys string
	// Run returns nil when the setting is off or usable.
	Run func(s config.Sidecar, now func() time.Time) error
}

// StartupChecks lists every start-up check, in the order serve runs them.
func StartupChecks() []StartupCheck {
	return []StartupCheck{
		{Keys: "ca_cert, ca_key", Run: checkCA},
		{Keys: "upstream_ca", Run: checkUpstreamCA},
		{Keys: "stale_dir", Run: checkStaleDir},
	}
}

// CheckStartup runs every start-up check and returns all failures joined,
// each prefixed with the keys it is about.
func CheckStartup(cfg *config.Config, now func() time.Time) error {
	var errs []error
	for _, c := range StartupChecks() {
		if err := c.Run(cfg.Sidecar, now); err != nil {
			errs = append(errs, fmt.Errorf("sidecar %s: %w", c.Keys, err))
		}
	}
	return errors.Join(errs...)
}

// checkCA loads the interception CA the way the proxy does (certs.Load):
// the key's mode, both files' contents, the pair matching, the validity.
func checkCA(s config.Sidecar, now func() time.Time) error {
	if s.CACert == "" {
		return nil
	}
	_, err := certs.Load(s.CACert, s.CAKey, now)
	return err
}

// checkUpstreamCA reads the extra upstream roots as the transport does.
func checkUpstreamCA(s config.Sidecar, _ func() time.Time) error {
	if s.UpstreamCA == "" {
		return nil
	}
	_, err := certs.Roots(s.UpstreamCA)
	return err
}

// checkStaleDir asks what opening the stale cache needs (stale.Open creates
// the directory, then reads it): an existing directory must be readable
// and searchable; a missing one needs its nearest existing ancestor to be a
// directory it can be created in.
func checkStaleDir(s config.Sidecar, _ func() time.Time) error {
	if s.StaleDir == "" {
		return nil
	}
	dir := filepath.Clean(s.StaleDir)
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		if err := unix.Access(dir, unix.R_OK|unix.X_OK); err != nil {
			return fmt.Errorf("cannot read %s: %w", dir, err)
		}
		return nil
	}
	if !missing(err) {
		return err
	}
	for parent := filepath.Dir(dir); ; parent = filepath.Dir(parent) {
		fi, err := os.Stat(parent)
		switch {
		case missing(err):
			continue
		case err != nil:
			return err
		case !fi.IsDir():
			return fmt.Errorf("cannot create %s: %s is not a directory", dir, parent)
		}
		if err := unix.Access(parent, unix.W_OK|unix.X_OK); err != nil {
			return fmt.Errorf("cannot create %s in %s: %w", dir, parent, err)
		}
		return nil
	}
}

// missing reports whether a path does not exist, including below a file
// (ENOTDIR), where MkdirAll will say which component is in the way.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR)
}
