package config

import (
	"strings"
	"testing"
	"time"
)

// TestHedgeAndSuspectSettings: hedge_after per format (file and
// NORA_<FMT>_HEDGE_AFTER), per format or key override; suspect_after
// global (file and NORA_CB_SUSPECT_AFTER) and overridden the same way;
// both in seconds with fractions; what each upstream resolves to. Defaults:
// hedging on (1 s) for maven and docker, whose chains are mirrors, off for
// the others; suspect_after 10 s.
func TestHedgeAndSuspectSettings(t *testing.T) {
	const second = "https://npm.mirror.test"
	twoNpm := "[npm]\nproxies = [\"https://registry.npmjs.org\", \"" + second + "\"]\n"
	for _, tc := range []struct {
		name          string
		file          string
		env           map[string]string
		format        string // the upstream looked at: the format's first
		hedge         time.Duration
		suspect       time.Duration
		wantError     string
		wantHedgeFrom string
	}{
		{name: "maven default", format: "maven", hedge: time.Second, suspect: 10 * time.Second},
		{name: "docker default", format: "docker", hedge: time.Second, suspect: 10 * time.Second},
		{name: "npm default off", file: twoNpm, format: "npm", hedge: 0, suspect: 10 * time.Second},
		{name: "per format table, fractions", file: twoNpm + "hedge_after = 0.25\n[circuit_breaker]\nsuspect_after = 0.5\n",
			format: "npm", hedge: 250 * time.Millisecond, suspect: 500 * time.Millisecond},
		{name: "env beats file", file: twoNpm + "hedge_after = 0.25\n[circuit_breaker]\nsuspect_after = 2\n",
			env:    map[string]string{"NORA_NPM_HEDGE_AFTER": "0.75", "NORA_CB_SUSPECT_AFTER": "3.5"},
			format: "npm", hedge: 750 * time.Millisecond, suspect: 3500 * time.Millisecond},
		{name: "format override", file: "[circuit_breaker.overrides.maven]\nhedge_after = 2\nsuspect_after = 4\n",
			format: "maven", hedge: 2 * time.Second, suspect: 4 * time.Second, wantHedgeFrom: `format "maven"`},
		{name: "key override", file: "[circuit_breaker.overrides.maven]\nhedge_after = 2\n" +
			"[circuit_breaker.overrides.\"maven:https://repo1.maven.org/maven2\"]\nhedge_after = 0\nsuspect_after = 0\n",
			format: "maven", hedge: 0, suspect: 0, wantHedgeFrom: `override "maven:https://repo1.maven.org/maven2"`},
		{name: "negative", file: "[maven]\nhedge_after = -1\n",
			wantError: "config.toml:2: maven.hedge_after: must be between 0 and 3600 (got -1)"},
		{name: "a duration string", file: "[circuit_breaker]\nsuspect_after = \"500ms\"\n",
			wantError: "circuit_breaker.suspect_after: must be a number, not a string"},
		{name: "env junk", env: map[string]string{"NORA_MAVEN_HEDGE_AFTER": "1s"},
			wantError: `env NORA_MAVEN_HEDGE_AFTER="1s": not a number`},
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
			u := cfg.Chain(tc.format)[0]
			if u.HedgeAfter != tc.hedge || u.SuspectAfter != tc.suspect {
				t.Fatalf("%s: hedge_after %v, suspect_after %v; want %v, %v", u.Key, u.HedgeAfter, u.SuspectAfter,
					tc.hedge, tc.suspect)
			}
			if from := cfg.HostThresholds(u.Key, u).HedgeAfterFrom; tc.wantHedgeFrom != "" && from != tc.wantHedgeFrom {
				t.Errorf("hedge_after from %q, want %q", from, tc.wantHedgeFrom)
			}
		})
	}
}
