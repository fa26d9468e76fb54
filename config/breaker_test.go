package config

import (
	"strings"
	"testing"
	"time"
)

// TestOpenTimeSettings: reset_timeout_max (global, per format, per key) and
// jitter (global), from the file and the environment, and what each key
// resolves to; defaults: the key's reset_timeout (a fixed open time) and
// 0.1.
func TestOpenTimeSettings(t *testing.T) {
	const pypiKey = "pypi:https://pypi.org/simple"
	for _, tc := range []struct {
		name      string
		file      string
		env       map[string]string
		key       string // resolved for pypiKey's upstream unless "cargo"
		max       time.Duration
		maxFrom   string
		jitter    float64
		wantError string
	}{
		{name: "defaults", max: 30 * time.Second, maxFrom: "reset_timeout", jitter: 0.1},
		{name: "follows reset_timeout when unset", file: "[circuit_breaker]\nreset_timeout = 45\n",
			max: 45 * time.Second, maxFrom: "reset_timeout", jitter: 0.1},
		{name: "global", file: "[circuit_breaker]\nreset_timeout_max = 240\njitter = 0.2\n",
			max: 240 * time.Second, maxFrom: "global", jitter: 0.2},
		{name: "jitter off", file: "[circuit_breaker]\njitter = 0\n", max: 30 * time.Second, maxFrom: "reset_timeout"},
		{name: "per format", file: "[circuit_breaker]\nreset_timeout_max = 240\n[circuit_breaker.overrides.pypi]\nreset_timeout_max = 600\n",
			max: 600 * time.Second, maxFrom: `format "pypi"`, jitter: 0.1},
		{name: "per key", file: "[circuit_breaker.overrides.pypi]\nreset_timeout_max = 600\n" +
			"[circuit_breaker.overrides.\"" + pypiKey + "\"]\nreset_timeout = 10\nreset_timeout_max = 80\n",
			max: 80 * time.Second, maxFrom: `override "` + pypiKey + `"`, jitter: 0.1},
		{name: "below another level's reset_timeout: fixed", file: "[circuit_breaker]\nreset_timeout_max = 60\n" +
			"[circuit_breaker.overrides.pypi]\nreset_timeout = 90\n",
			max: 90 * time.Second, maxFrom: "reset_timeout", jitter: 0.1},
		{name: "env beats file", file: "[circuit_breaker]\nreset_timeout_max = 60\njitter = 0.3\n",
			env: map[string]string{"NORA_CB_RESET_TIMEOUT_MAX": "120", "NORA_CB_JITTER": "0.05"},
			max: 120 * time.Second, maxFrom: "global", jitter: 0.05},

		{name: "max below reset_timeout", file: "[circuit_breaker]\nreset_timeout = 30\nreset_timeout_max = 10\n",
			wantError: "config.toml:3: circuit_breaker.reset_timeout_max: must be >= reset_timeout (30)"},
		{name: "env max below env reset_timeout", env: map[string]string{"NORA_CB_RESET_TIMEOUT": "60", "NORA_CB_RESET_TIMEOUT_MAX": "30"},
			wantError: `env NORA_CB_RESET_TIMEOUT_MAX="30": must be >= reset_timeout (60)`},
		{name: "override max below its reset_timeout", file: "[circuit_breaker.overrides.pypi]\nreset_timeout = 90\nreset_timeout_max = 60\n",
			wantError: "config.toml:3: circuit_breaker.overrides.pypi.reset_timeout_max: must be >= reset_timeout (90) of the same table"},
		{name: "negative max", file: "[circuit_breaker]\nreset_timeout_max = -1\n",
			wantError: "config.toml:2: circuit_breaker.reset_timeout_max: must be >= 0 (got -1)"},
		{name: "max not an integer", file: "[circuit_breaker]\nreset_timeout_max = \"4m\"\n",
			wantError: "circuit_breaker.reset_timeout_max: must be an integer, not a string"},
		{name: "jitter too large", file: "[circuit_breaker]\njitter = 0.7\n",
			wantError: "config.toml:2: circuit_breaker.jitter: must be between 0 and 0.5 (got 0.7)"},
		{name: "jitter negative", file: "[circuit_breaker]\njitter = -0.1\n",
			wantError: "circuit_breaker.jitter: must be between 0 and 0.5 (got -0.1)"},
		{name: "jitter as a percentage", file: "[circuit_breaker]\njitter = 10\n",
			wantError: "circuit_breaker.jitter: must be between 0 and 0.5 (got 10)"},
		{name: "jitter not a number", file: "[circuit_breaker]\njitter = \"10%\"\n",
			wantError: "circuit_breaker.jitter: must be a number, not a string"},
		{name: "jitter nan", file: "[circuit_breaker]\njitter = nan\n",
			wantError: "circuit_breaker.jitter: must be between 0 and 0.5 (got NaN)"},
		{name: "env jitter junk", env: map[string]string{"NORA_CB_JITTER": "lots"},
			wantError: `env NORA_CB_JITTER="lots": not a number`},
		{name: "env jitter too large", env: map[string]string{"NORA_CB_JITTER": "1"},
			wantError: `env NORA_CB_JITTER="1": must be between 0 and 0.5`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := load(t, tc.file, tc.env, Flags{})
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			bs := cfg.HostThresholds(pypiKey, &Upstream{Key: pypiKey, Format: "pypi"})
			if bs.ResetTimeoutMax != tc.max || bs.ResetTimeoutMaxFrom != tc.maxFrom || bs.Jitter != tc.jitter {
				t.Fatalf("reset_timeout_max %v from %q, jitter %v; want %v from %q, %v",
					bs.ResetTimeoutMax, bs.ResetTimeoutMaxFrom, bs.Jitter, tc.max, tc.maxFrom, tc.jitter)
			}
		})
	}
}
