package config

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	cfg := mustLoad(t, "", nil, Flags{})
	want := []string{
		"docker:https://registry-1.docker.io https://registry-1.docker.io",
		"maven:https://repo1.maven.org/maven2 https://repo1.maven.org/maven2",
		"npm:https://registry.npmjs.org https://registry.npmjs.org",
		"pypi:https://pypi.org/simple https://pypi.org/simple",
		"cargo https://crates.io",
		"go https://proxy.golang.org",
	}
	if got := summary(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("upstreams\n got %q\nwant %q", got, want)
	}
	if got := cfg.Formats(); !reflect.DeepEqual(got, []string{"docker", "maven", "npm", "pypi", "cargo", "go"}) {
		t.Errorf("Formats() = %q", got)
	}
	cb := cfg.CircuitBreaker
	if cb.Enabled || cb.FailureThreshold != 5 || cb.ResetTimeout != 30*time.Second {
		t.Errorf("breaker defaults = %+v", cb)
	}
	s := cfg.Sidecar
	wantS := defaultSidecar()
	if !reflect.DeepEqual(s, wantS) {
		t.Errorf("sidecar defaults\n got %+v\nwant %+v", s, wantS)
	}
	if s.StaleMaxBytes != 1<<30 || s.StaleMaxObjectBytes != 64<<20 || s.DialTimeout != 5*time.Second ||
		s.MaxUpstreamConnsPerHost != 256 {
		t.Errorf("sidecar sizes/timeouts = %+v", s)
	}
	if !hasWarning(cfg, "circuit breaker is disabled") {
		t.Errorf("warnings %q lack the disabled-breaker warning", cfg.Warnings)
	}
	for _, u := range cfg.Upstreams {
		if u.Source != "default" {
			t.Errorf("%s source = %q", u.Key, u.Source)
		}
	}
	docker := cfg.Chain("docker")[0]
	if docker.ProxyTimeout != 300*time.Second || docker.ReadTimeout != 60*time.Second {
		t.Errorf("docker timeouts %v %v", docker.ProxyTimeout, docker.ReadTimeout)
	}
	if p := cfg.Chain("pypi")[0]; p.ProxyTimeout != 30*time.Second || p.ReadTimeout != 30*time.Second {
		t.Errorf("pypi timeouts %v %v", p.ProxyTimeout, p.ReadTimeout)
	}
}

func TestPrecedence(t *testing.T) {
	file := "[circuit_breaker]\nenabled = false\nfailure_threshold = 7\nreset_timeout = 11\n" +
		"[sidecar]\nlisten = \"127.0.0.1:1111\"\nadmin_listen = \"127.0.0.1:2222\"\nlog_level = \"debug\"\n"
	tests := []struct {
		name                 string
		env                  map[string]string
		flags                Flags
		listen, admin, level string
		enabled              bool
		threshold            int
		reset                time.Duration
	}{
		{name: "file beats defaults", listen: "127.0.0.1:1111", admin: "127.0.0.1:2222", level: "debug", threshold: 7, reset: 11 * time.Second},
		{name: "env beats file",
			env:    map[string]string{"NORA_SIDECAR_LISTEN": "127.0.0.1:3333", "NORA_SIDECAR_LOG_LEVEL": "warn", "NORA_CB_ENABLED": "1", "NORA_CB_THRESHOLD": "2", "NORA_CB_RESET_TIMEOUT": "0"},
			listen: "127.0.0.1:3333", admin: "127.0.0.1:2222", level: "warn", enabled: true, threshold: 2},
		{name: "flags beat env",
			env:    map[string]string{"NORA_SIDECAR_LISTEN": "127.0.0.1:3333", "NORA_SIDECAR_ADMIN_LISTEN": "127.0.0.1:4444"},
			flags:  Flags{Listen: "127.0.0.1:5555", AdminListen: "127.0.0.1:6666"},
			listen: "127.0.0.1:5555", admin: "127.0.0.1:6666", level: "debug", threshold: 7, reset: 11 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustLoad(t, file, tc.env, tc.flags)
			s, cb := cfg.Sidecar, cfg.CircuitBreaker
			if s.Listen != tc.listen || s.AdminListen != tc.admin || s.LogLevel != tc.level {
				t.Errorf("listen=%s admin=%s level=%s", s.Listen, s.AdminListen, s.LogLevel)
			}
			if cb.Enabled != tc.enabled || cb.FailureThreshold != tc.threshold || cb.ResetTimeout != tc.reset {
				t.Errorf("breaker = %+v", cb)
			}
		})
	}
}

func TestRegistriesEnable(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  map[string]string
		want []string
	}{
		{name: "env list", env: map[string]string{"NORA_REGISTRIES_ENABLE": "docker, npm"}, want: []string{"docker", "npm"}},
		{name: "env all minus", env: map[string]string{"NORA_REGISTRIES_ENABLE": "all,-maven,-raw"},
			want: []string{"docker", "npm", "pypi", "cargo", "go", "gems", "terraform", "ansible", "nuget", "pub", "conan"}},
		{name: "env only removals", env: map[string]string{"NORA_REGISTRIES_ENABLE": "-docker,-maven,-npm,-pypi,-gems,-terraform,-ansible,-nuget,-pub,-conan"},
			want: []string{"cargo", "go"}},
		{name: "env pub_dart alias", env: map[string]string{"NORA_REGISTRIES_ENABLE": "pub_dart"}, want: []string{"pub"}},
		{name: "empty env is ignored", env: map[string]string{"NORA_REGISTRIES_ENABLE": ""}, file: "[registries]\nenable = \"go\"\n", want: []string{"go"}},
		{name: "file string", file: "[registries]\nenable = \"all,-docker,-maven,-npm,-pypi,-cargo,-go,-terraform\"\n",
			want: []string{"gems", "ansible", "nuget", "pub", "conan"}},
		{name: "file list", file: "[registries]\nenable = [\"pypi\", \"maven\"]\n", want: []string{"maven", "pypi"}},
		{name: "env beats file", file: "[registries]\nenable = [\"pypi\"]\n", env: map[string]string{"NORA_REGISTRIES_ENABLE": "go"}, want: []string{"go"}},
		{name: "tier wins over legacy flags", file: "[registries]\nenable = [\"pypi\"]\n[gems]\nenabled = true\n", want: []string{"pypi"}},
		{name: "legacy per-format flags", file: "[maven]\nenabled = false\n[gems]\nenabled = true\n[pub_dart]\nenabled = true\n",
			env:  map[string]string{"NORA_NPM_ENABLED": "false", "NORA_TF_ENABLED": "TRUE"},
			want: []string{"docker", "pypi", "cargo", "go", "gems", "terraform", "pub"}},
		{name: "rpm without repos has no upstream", env: map[string]string{"NORA_REGISTRIES_ENABLE": "rpm,deb"}, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustLoad(t, tc.file, tc.env, Flags{})
			if got := cfg.Formats(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Formats() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestThresholds: an upstream's own key looks its settings up in its
// override, then its format's, then the global value; a per-format key
// (cargo) is the format itself.
func TestThresholds(t *testing.T) {
	file := `
[circuit_breaker]
enabled = true
failure_threshold = 5
reset_timeout = 30
[circuit_breaker.overrides."pypi:https://pypi.org/simple"]
failure_threshold = 2
[circuit_breaker.overrides.pypi]
failure_threshold = 9
reset_timeout = 90
[circuit_breaker.overrides.cargo]
reset_timeout = 5
`
	cfg := mustLoad(t, file, nil, Flags{})
	tests := []struct {
		key, format   string
		threshold     int
		thresholdFrom string
		reset         time.Duration
		resetFrom     string
	}{
		{"pypi:https://pypi.org/simple", "pypi", 2, `override "pypi:https://pypi.org/simple"`, 90 * time.Second, `format "pypi"`},
		{"pypi:https://other.test/simple", "pypi", 9, `format "pypi"`, 90 * time.Second, `format "pypi"`},
		{"cargo", "cargo", 5, "global", 5 * time.Second, `format "cargo"`},
		{"maven:https://repo1.maven.org/maven2", "maven", 5, "global", 30 * time.Second, "global"},
	}
	for _, tc := range tests {
		bs := cfg.HostThresholds(tc.key, &Upstream{Key: tc.key, Format: tc.format})
		th, thFrom, rs, rsFrom := bs.FailureThreshold, bs.FailureThresholdFrom, bs.ResetTimeout, bs.ResetTimeoutFrom
		if th != tc.threshold || thFrom != tc.thresholdFrom || rs != tc.reset || rsFrom != tc.resetFrom {
			t.Errorf("HostThresholds(%q) = %d %s %v %s; want %d %s %v %s", tc.key, th, thFrom, rs, rsFrom,
				tc.threshold, tc.thresholdFrom, tc.reset, tc.resetFrom)
		}
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("unexpected warnings %q", cfg.Warnings)
	}
}

func TestWarnings(t *testing.T) {
	file := `
[circuit_breaker]
enabled = true
[circuit_breaker.overrides."pypi:https://typo.test/simple"]
failure_threshold = 2
[circuit_breaker.overrides.gems]
failure_threshold = 2
[sidecar]
listen = "0.0.0.0:3128"
[sidecar.aliases]
"maven:https://nowhere.test" = ["x.test"]
`
	cfg := mustLoad(t, file, map[string]string{"NORA_DOCKER_UPSTREAMS": "https://registry-1.docker.io"}, Flags{})
	for _, w := range []string{`"pypi:https://typo.test/simple" names no configured`, `"gems" names no configured`,
		"open relay", "NORA_DOCKER_UPSTREAMS is deprecated", `sidecar.aliases "maven:https://nowhere.test"`} {
		if !hasWarning(cfg, w) {
			t.Errorf("warnings %q lack %q", cfg.Warnings, w)
		}
	}
	if hasWarning(cfg, "disabled") {
		t.Errorf("breaker is enabled, got %q", cfg.Warnings)
	}
	cfg = mustLoad(t, "[sidecar]\nlisten = \"0.0.0.0:3128\"\ndeny_unlisted = true\n", nil, Flags{})
	if hasWarning(cfg, "open relay") {
		t.Errorf("deny_unlisted set, got %q", cfg.Warnings)
	}
}

func TestSidecarValues(t *testing.T) {
	file := `
[sidecar]
ca_cert = "/etc/nb/ca.pem"
ca_key = "/etc/nb/ca-key.pem"
stale_dir = "/var/cache/nb"
stale_max_bytes = 2147483648
stale_max_object_bytes = "16MiB"
stale_authenticated = "share"
dial_timeout = "2s"
allow_hosts = ["Internal.Example:8443", "github.com"]
admin_token = "tok"
[sidecar.resolve]
"PyPI-A.test:443" = "127.0.0.1:8443"
`
	cfg := mustLoad(t, file, map[string]string{
		"NORA_SIDECAR_IDLE_TIMEOUT":                "1m30s",
		"NORA_SIDECAR_DENY_UNLISTED":               "true",
		"NORA_SIDECAR_STALE_MAX_BYTES":             "4GiB",
		"NORA_SIDECAR_MAX_CONNECTIONS":             "10",
		"NORA_SIDECAR_PROCS":                       "3",
		"NORA_SIDECAR_MAX_UPSTREAM_CONNS_PER_HOST": "32",
	}, Flags{})
	s := cfg.Sidecar
	checks := []struct {
		name      string
		got, want any
	}{
		{"ca", s.CACert + " " + s.CAKey, "/etc/nb/ca.pem /etc/nb/ca-key.pem"},
		{"stale_dir", s.StaleDir, "/var/cache/nb"},
		{"stale_max_bytes (env)", s.StaleMaxBytes, int64(4 << 30)},
		{"stale_max_object_bytes", s.StaleMaxObjectBytes, int64(16 << 20)},
		{"stale_authenticated", s.StaleAuthenticated, "share"},
		{"dial_timeout", s.DialTimeout, 2 * time.Second},
		{"idle_timeout (env)", s.IdleTimeout, 90 * time.Second},
		{"deny_unlisted (env)", s.DenyUnlisted, true},
		{"allow_hosts", s.AllowHosts, []string{"internal.example:8443", "github.com"}},
		{"resolve", s.Resolve, map[string]string{"pypi-a.test:443": "127.0.0.1:8443"}},
		{"max_connections", s.MaxConnections, 10},
		{"procs (env)", s.Procs, 3},
		{"max_upstream_conns_per_host (env)", s.MaxUpstreamConnsPerHost, 32},
		{"admin_token", s.AdminToken, "tok"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	cfg = mustLoad(t, "", map[string]string{
		"NORA_SIDECAR_ALLOW_HOSTS": "A.test, b.test:80",
		"NORA_SIDECAR_RESOLVE":     "a.test:80=127.0.0.1:8080,b.test:443=[::1]:8443",
		"NORA_SIDECAR_ALIASES":     "pypi=mirror-files.test|cdn.test",
	}, Flags{})
	if got := cfg.Sidecar.AllowHosts; !reflect.DeepEqual(got, []string{"a.test", "b.test:80"}) {
		t.Errorf("allow_hosts env = %q", got)
	}
	if got := cfg.Sidecar.Resolve; !reflect.DeepEqual(got, map[string]string{"a.test:80": "127.0.0.1:8080", "b.test:443": "[::1]:8443"}) {
		t.Errorf("resolve env = %v", got)
	}
	if got := cfg.Chain("pypi")[0].Hosts; !reflect.DeepEqual(got, []string{"pypi.org", "pypi.python.org", "files.pythonhosted.org", "mirror-files.test", "cdn.test"}) {
		t.Errorf("pypi hosts with env aliases = %q", got)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1048576", 1 << 20, true}, {"64MiB", 64 << 20, true}, {"64 mib", 64 << 20, true}, {"1GB", 1e9, true},
		{"2k", 2048, true}, {"10B", 10, true}, {"", 0, false}, {"MiB", 0, false}, {"1.5GiB", 0, false},
		{"-1", 0, false}, {"99999999999TiB", 0, false}, {"5 parsecs", 0, false},
	}
	for _, tc := range tests {
		got, err := parseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestHostBreakers: every breaker key once, in config order, each with the
// host it admits, the (first) upstream that host belongs to and the
// settings HostThresholds gives it; a per-format key several upstreams
// share is listed with the first.
func TestHostBreakers(t *testing.T) {
	cfg := mustLoad(t, `
[circuit_breaker.overrides."pypi:https://pypi.org/simple@files.pythonhosted.org"]
failure_threshold = 20
[circuit_breaker.overrides.rpm]
reset_timeout = 7
[registries]
enable = "pypi,rpm"
[rpm.proxies]
base = "https://rpm-a.test/base"
updates = "https://rpm-b.test/updates"
[sidecar.aliases]
rpm = ["mirror.rpm.test:8443"]
`, nil, Flags{})
	pypi, rpmA := cfg.Chain("pypi")[0], cfg.Chain("rpm")[0]
	want := []struct {
		key, host string
		u         *Upstream
	}{
		{"pypi:https://pypi.org/simple", "pypi.org", pypi},
		{"pypi:https://pypi.org/simple@pypi.python.org", "pypi.python.org", pypi},
		{"pypi:https://pypi.org/simple@files.pythonhosted.org", "files.pythonhosted.org", pypi},
		{"rpm", "rpm-a.test", rpmA},
		{"rpm@mirror.rpm.test:8443", "mirror.rpm.test:8443", rpmA},
	}
	got := cfg.HostBreakers()
	if len(got) != len(want) {
		t.Fatalf("HostBreakers() has %d keys, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		b := got[i]
		if b.Key != w.key || b.Host != w.host || b.Upstream != w.u {
			t.Errorf("HostBreakers()[%d] = %s %s %s, want %s %s %s", i, b.Key, b.Host, b.Upstream.Key, w.key, w.host, w.u.Key)
		}
		if th := cfg.HostThresholds(w.key, w.u); b.BreakerSettings != th {
			t.Errorf("%s settings %+v, want HostThresholds' %+v", w.key, b.BreakerSettings, th)
		}
	}
	if got[2].FailureThreshold != 20 || got[4].ResetTimeout != 7*time.Second || got[4].ResetTimeoutFrom != `format "rpm"` {
		t.Errorf("overrides not applied: %+v, %+v", got[2].BreakerSettings, got[4].BreakerSettings)
	}
}

// TestHostThresholds: a host's breaker looks its settings up in its own
// override, then its upstream's, then its format's, then the global value.
func TestHostThresholds(t *testing.T) {
	file := `
[circuit_breaker]
enabled = true
failure_threshold = 5
reset_timeout = 30
[circuit_breaker.overrides."pypi:https://pypi.org/simple@files.pythonhosted.org"]
failure_threshold = 20
[circuit_breaker.overrides."pypi:https://pypi.org/simple"]
failure_threshold = 2
reset_timeout = 40
[circuit_breaker.overrides.pypi]
reset_timeout = 90
[circuit_breaker.overrides."cargo@index.crates.io"]
reset_timeout = 7
[registries]
enable = "pypi,cargo"
[sidecar.aliases]
cargo = ["mirror.crates.test:8443"]
`
	cfg := mustLoad(t, file, nil, Flags{})
	pypi, cargo := cfg.Chain("pypi")[0], cfg.Chain("cargo")[0]
	tests := []struct {
		u             *Upstream
		host, key     string
		threshold     int
		thresholdFrom string
		reset         time.Duration
		resetFrom     string
	}{
		{pypi, "pypi.org", "pypi:https://pypi.org/simple", 2, `override "pypi:https://pypi.org/simple"`,
			40 * time.Second, `override "pypi:https://pypi.org/simple"`},
		{pypi, "files.pythonhosted.org", "pypi:https://pypi.org/simple@files.pythonhosted.org",
			20, `override "pypi:https://pypi.org/simple@files.pythonhosted.org"`,
			40 * time.Second, `override "pypi:https://pypi.org/simple"`},
		{cargo, "crates.io", "cargo", 5, "global", 30 * time.Second, "global"},
		{cargo, "index.crates.io", "cargo@index.crates.io", 5, "global", 7 * time.Second, `override "cargo@index.crates.io"`},
		{cargo, "mirror.crates.test:8443", "cargo@mirror.crates.test:8443", 5, "global", 30 * time.Second, "global"},
	}
	for _, tc := range tests {
		key := tc.u.HostKey(tc.host)
		if key != tc.key {
			t.Errorf("HostKey(%q) = %q, want %q", tc.host, key, tc.key)
			continue
		}
		bs := cfg.HostThresholds(key, tc.u)
		if bs.FailureThreshold != tc.threshold || bs.FailureThresholdFrom != tc.thresholdFrom ||
			bs.ResetTimeout != tc.reset || bs.ResetTimeoutFrom != tc.resetFrom {
			t.Errorf("HostThresholds(%q) = %+v; want %d %s %v %s", key, bs, tc.threshold, tc.thresholdFrom,
				tc.reset, tc.resetFrom)
		}
	}
	if !slices.Contains(cargo.Hosts, "mirror.crates.test:8443") {
		t.Errorf("cargo hosts %q lack the alias that names a port", cargo.Hosts)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("host-key overrides warned about: %q", cfg.Warnings)
	}
}

// A credential_headers list adds to the default one (docs/behaviour.md §10):
// naming a registry's own token header must not drop GitLab's.
func TestCredentialHeadersAddToTheDefault(t *testing.T) {
	file := "[sidecar]\ncredential_headers = [\"x-my-token\", \"private-token\", \"X-My-Token\"]\n"
	got := mustLoad(t, file, nil, Flags{}).Sidecar.CredentialHeaders
	want := append(defaultCredentialHeaders(), "X-My-Token")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("credential_headers\n got %q\nwant %q", got, want)
	}
	if got := mustLoad(t, "[sidecar]\ncredential_headers = []\n", nil, Flags{}).Sidecar.CredentialHeaders; !reflect.DeepEqual(got, defaultCredentialHeaders()) {
		t.Errorf("an empty list gave %q, want the default", got)
	}
}
