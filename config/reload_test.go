package config

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const reloadBase = `
[circuit_breaker]
enabled = true
failure_threshold = 3
[registries]
enable = "maven"
[maven]
proxies = ["https://repo.test/m2"]
`

// reloadFrom is a reload of current whose file reads as texts, one per
// read (the last one repeats).
func reloadFrom(t *testing.T, current *Config, texts ...string) (*Config, int, error) {
	t.Helper()
	var reads atomic.Int32
	return func() (*Config, int, error) {
		cfg, err := Reload(ReloadOptions{Settle: time.Millisecond, Attempts: 5, Options: Options{
			Flags: Flags{ConfigPath: current.Path},
			ReadFile: func(string) ([]byte, error) {
				i := int(reads.Add(1)) - 1
				return []byte(texts[min(i, len(texts)-1)]), nil
			}}}, current)
		return cfg, int(reads.Load()), err
	}()
}

// TestReloadRefusesWhatNoOperatorMeant (issue 21, point 2): a truncated
// file, a file that names none of the upstreams in force, and a file still
// being written are refused or waited out; an honest change is applied.
func TestReloadRefusesWhatNoOperatorMeant(t *testing.T) {
	current := mustLoad(t, reloadBase, nil, Flags{})
	if current.Path == "" {
		t.Fatal("the test configuration has no file")
	}
	for _, empty := range []string{"", "\n  \n"} {
		if _, _, err := reloadFrom(t, current, empty); !errors.Is(err, ErrEmptyReload) {
			t.Errorf("empty file %q: %v, want ErrEmptyReload", empty, err)
		}
	}
	other := "[registries]\nenable = \"npm\"\n[npm]\nproxy = \"https://npm.test\"\n"
	if _, _, err := reloadFrom(t, current, other); !errors.Is(err, ErrUpstreamsGone) {
		t.Errorf("a file naming none of the upstreams in force: %v, want ErrUpstreamsGone", err)
	}
	if _, _, err := reloadFrom(t, current, "[sidecar]\nlog_level = \"debug\"\n"); !errors.Is(err, ErrUpstreamsGone) {
		t.Errorf("a file of defaults only: %v, want ErrUpstreamsGone", err)
	}
	// A change written in two steps: the first read catches the writer
	// mid-write, and only the text two reads agree on is applied.
	changed := strings.Replace(reloadBase, "failure_threshold = 3", "failure_threshold = 7", 1)
	cfg, reads, err := reloadFrom(t, current, changed[:20], changed, changed)
	if err != nil {
		t.Fatalf("an honest change: %v", err)
	}
	if cfg.CircuitBreaker.FailureThreshold != 7 || reads < 3 {
		t.Fatalf("threshold %d after %d reads, want 7 once two reads agreed", cfg.CircuitBreaker.FailureThreshold, reads)
	}
	if _, _, err := reloadFrom(t, current, "a", "b", "c", "d", "e", "f", "g", "h"); err == nil {
		t.Error("a file that never stops changing was applied")
	}
	// Adding an upstream beside the one in force is a change like any.
	more := strings.Replace(reloadBase, `proxies = ["https://repo.test/m2"]`, `proxies = ["https://repo.test/m2", "https://mirror.test/m2"]`, 1)
	if cfg, _, err := reloadFrom(t, current, more); err != nil || len(cfg.Upstreams) != 2 {
		t.Errorf("adding an upstream: %v", err)
	}
}

// TestRetryAfterMaxTable: [sidecar.retry_after_max] sets formats' limits
// over the defaults, 0 for none; a bad value is an error at its line.
func TestRetryAfterMaxTable(t *testing.T) {
	cfg := mustLoad(t, "[sidecar.retry_after_max]\npypi = \"0\"\ndocker = \"30s\"\n", nil, Flags{})
	got := cfg.Sidecar.RetryAfterMax
	if got["pypi"] != 0 || got["docker"] != 30*time.Second || got["npm"] != time.Second || got["maven"] != 0 {
		t.Fatalf("retry_after_max = %v", got)
	}
	if _, err := load(t, "[sidecar.retry_after_max]\npypi = \"soon\"\n", nil, Flags{}); err == nil ||
		!strings.Contains(err.Error(), "retry_after_max") {
		t.Fatalf("a bad duration: %v", err)
	}
	env := map[string]string{"NORA_SIDECAR_RETRY_AFTER_MAX": "cargo=2s"}
	if cfg := mustLoad(t, "", env, Flags{}); cfg.Sidecar.RetryAfterMax["cargo"] != 2*time.Second {
		t.Fatalf("from the environment: %v", cfg.Sidecar.RetryAfterMax)
	}
}
