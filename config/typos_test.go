package config

import (
	"slices"
	"strings"
	"testing"
)

// TestTypoWarnings: a key NORA's tables do not have is warned about where it
// was written, with the key it most likely misspells, and changes nothing.
func TestTypoWarnings(t *testing.T) {
	tests := []struct {
		name, file string
		want       []string // each must be one of the warnings
	}{
		{"breaker threshold", "[circuit_breaker]\nenabled = true\nfailure_treshold = 3\n",
			[]string{"config.toml:3: circuit_breaker.failure_treshold: unknown key, ignored by NORA and nora-breaker (did you mean failure_threshold?)"}},
		{"override field", "[circuit_breaker.overrides.pypi]\nreset_timout = 5\n",
			[]string{"config.toml:2: circuit_breaker.overrides.pypi.reset_timout: unknown key, ignored by NORA and nora-breaker (did you mean reset_timeout?)"}},
		{"maven timeout", "[maven]\nproxy_timout = 60\n",
			[]string{"config.toml:2: maven.proxy_timout: unknown key, ignored by NORA and nora-breaker (did you mean proxy_timeout?)"}},
		{"registries enable", "[registries]\nenabled = \"all\"\n",
			[]string{"config.toml:2: registries.enabled: unknown key, ignored by NORA and nora-breaker (did you mean enable?)"}},
		{"swapped letters in an entry", "[maven]\nproxies = [\n  { url = \"https://a.test/m2\", auht = \"u:p\" },\n]\n",
			[]string{"config.toml:3: maven.proxies[0].auht: unknown key, ignored by NORA and nora-breaker (did you mean auth?)"}},
		{"docker upstream table", "[[docker.upstreams]]\nurl = \"https://a.test\"\n[[docker.upstreams]]\nurl = \"https://b.test\"\nprefx = \"b\"\n",
			[]string{"config.toml:5: docker.upstreams[1].prefx: unknown key, ignored by NORA and nora-breaker (did you mean prefix?)"}},
		{"named repository", "[rpm]\nenabled = true\n[rpm.proxies]\nbaseos = { url = \"https://m.test/el9\", uth = \"u:p\" }\n",
			[]string{"config.toml:4: rpm.proxies.baseos.uth: unknown key, ignored by NORA and nora-breaker (did you mean auth?)"}},
		{"nothing near", "[go]\nzzz = 1\n",
			[]string{"config.toml:2: go.zzz: unknown key, ignored by NORA and nora-breaker (known keys: enabled, proxy_timeout, hedge_after, metadata_ttl, proxy, proxy_auth, proxy_timeout_zip)"}},
		{"pub's table name", "[pub_dart]\nproxi = \"https://pub.example\"\n",
			[]string{"config.toml:2: pub_dart.proxi: unknown key, ignored by NORA and nora-breaker (did you mean proxy?)"}},
		{"NORA's own keys are known", "[docker]\ndefault_action = \"deny\"\nserve_stale = true\nmetadata_ttl = -1\n" +
			"[npm]\nrevalidate = true\nproxy_auth = \"u:p\"\n[nuget]\nmetadata_proxy_timeout = 2\n[conan]\nproxy_timeout_dl = 120\n" +
			"[server]\nport = 4000\nwhatever = 1\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustLoad(t, tc.file, nil, Flags{ConfigPath: "config.toml"})
			var typos []string
			for _, w := range cfg.Warnings {
				if strings.Contains(w, "unknown key") {
					typos = append(typos, w)
				}
			}
			if strings.Join(typos, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("typo warnings\n got %q\nwant %q", typos, tc.want)
			}
		})
	}
}

// TestTypoChangesNothing: the misspelt threshold stays at its default, which
// is why the warning matters.
func TestTypoChangesNothing(t *testing.T) {
	cfg := mustLoad(t, "[circuit_breaker]\nfailure_treshold = 3\n", nil, Flags{})
	if cfg.CircuitBreaker.FailureThreshold != defaultFailureThreshold {
		t.Fatalf("threshold %d, want the default %d", cfg.CircuitBreaker.FailureThreshold, defaultFailureThreshold)
	}
}

func TestSidecarTypoSuggestsKey(t *testing.T) {
	_, err := load(t, "[sidecar]\ndeny_unlistd = true\n", nil, Flags{})
	if err == nil || !strings.Contains(err.Error(), "unknown key in [sidecar]; did you mean deny_unlisted?") {
		t.Fatalf("err = %v, want a suggestion of deny_unlisted", err)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"auth", "auth", 0}, {"auht", "auth", 1}, {"proxy_timout", "proxy_timeout", 1},
		{"failure_treshold", "failure_threshold", 1}, {"abc", "", 3}, {"kitten", "sitting", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestFormatTableKeys(t *testing.T) {
	keys := FormatTableKeys()
	if len(keys) != len(formatSpecs()) {
		t.Fatalf("%d tables, want one per format (%d)", len(keys), len(formatSpecs()))
	}
	for table, want := range map[string]string{"docker": "default_action", "pub_dart": "proxy", "rpm": "proxies", "go": "proxy_timeout_zip"} {
		if !slices.Contains(keys[table], want) {
			t.Errorf("[%s] keys %q lack %s", table, keys[table], want)
		}
	}
}
