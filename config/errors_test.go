package config

import (
	"errors"
	"strings"
	"testing"
)

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		env   map[string]string
		flags Flags
		want  []string // substrings that must all appear
	}{
		{name: "invalid TOML names its line", file: "[circuit_breaker]\nenabled = tru\n",
			want: []string{"config.toml:2: invalid TOML"}},
		{name: "wrong type names key and line", file: "[server]\nport = 4000\n[circuit_breaker]\nfailure_threshold = \"x\"\n",
			want: []string{"config.toml:4: circuit_breaker.failure_threshold: must be an integer, not a string"}},
		{name: "zero threshold", file: "[circuit_breaker]\nenabled = true\nfailure_threshold = 0\n",
			want: []string{"config.toml:3: circuit_breaker.failure_threshold: must be >= 1 (got 0)"}},
		{name: "negative reset timeout", file: "[circuit_breaker]\n\nreset_timeout = -5\n",
			want: []string{"config.toml:3: circuit_breaker.reset_timeout: must be >= 0 (got -5)"}},
		{name: "override with bad value", file: "[circuit_breaker.overrides.\"pypi:https://pypi.org/simple\"]\nfailure_threshold = 0\n",
			want: []string{`config.toml:2: circuit_breaker.overrides."pypi:https://pypi.org/simple".failure_threshold: must be >= 1`}},
		{name: "env threshold not an integer", env: map[string]string{"NORA_CB_THRESHOLD": "five"},
			want: []string{`env NORA_CB_THRESHOLD="five": not an integer`}},
		{name: "env enabled junk", env: map[string]string{"NORA_CB_ENABLED": "yes"},
			want: []string{`env NORA_CB_ENABLED="yes": must be true, false, 1 or 0`}},
		{name: "env reset negative", env: map[string]string{"NORA_CB_RESET_TIMEOUT": "-1"},
			want: []string{`env NORA_CB_RESET_TIMEOUT="-1": must be >= 0`}},
		{name: "bad upstream URL in file", file: "[maven]\nproxies = [\n  \"https://repo1.maven.org/maven2\",\n  \"ftp://mirror\",\n]\n",
			want: []string{`config.toml:4: maven.proxies[1]: invalid URL "ftp://mirror": scheme must be http or https`}},
		{name: "URL without host", file: "[[docker.upstreams]]\nurl = \"https:///v2\"\n",
			want: []string{`config.toml:2: docker.upstreams[0].url: invalid URL "https:///v2": no host`}},
		{name: "malformed NORA_MAVEN_PROXIES entry", env: map[string]string{"NORA_MAVEN_PROXIES": "https://a.test|u:p,ht tp://b|x:y"},
			want: []string{`env NORA_MAVEN_PROXIES[1]="ht tp://b|***": invalid URL`}},
		{name: "unknown sidecar key", file: "[sidecar]\nlisten = \"127.0.0.1:3128\"\ndeny_unlistd = true\n",
			want: []string{"config.toml:3: sidecar.deny_unlistd: unknown key in [sidecar]"}},
		{name: "sidecar wrong type", file: "[sidecar]\ndeny_unlisted = \"yes\"\n",
			want: []string{"config.toml:2: sidecar.deny_unlisted: must be true or false"}},
		{name: "ca_cert without ca_key", file: "[sidecar]\nca_cert = \"/ca.pem\"\n",
			want: []string{"config.toml:2: sidecar.ca_cert: ca_cert and ca_key must be set together"}},
		{name: "bad listen flag", flags: Flags{Listen: "nope"},
			want: []string{`flag --listen="nope": must be host:port`}},
		{name: "bad admin listen env", env: map[string]string{"NORA_SIDECAR_ADMIN_LISTEN": "1.2.3.4:99999"},
			want: []string{`env NORA_SIDECAR_ADMIN_LISTEN="1.2.3.4:99999": must be host:port: bad port`}},
		{name: "admin listen on the proxy's port", file: "[sidecar]\nlisten = \"0.0.0.0:3128\"\nadmin_listen = \"0.0.0.0:3128\"\n",
			want: []string{`config.toml:3: sidecar.admin_listen: must not take the port of listen (0.0.0.0:3128)`}},
		{name: "admin listen on a host the wildcard listen covers", env: map[string]string{"NORA_SIDECAR_ADMIN_LISTEN": "127.0.0.1:3128"},
			file: "[sidecar]\nlisten = \":3128\"\n", want: []string{`NORA_SIDECAR_ADMIN_LISTEN="127.0.0.1:3128": must not take the port of listen`}},
		{name: "log level", file: "[sidecar]\nlog_level = \"loud\"\n", want: []string{"sidecar.log_level: must be trace"}},
		{name: "log format", env: map[string]string{"NORA_SIDECAR_LOG_FORMAT": "xml"}, want: []string{"must be one of json, console"}},
		{name: "stale authenticated", file: "[sidecar]\nstale_authenticated = \"all\"\n", want: []string{"must be one of off, isolate, share"}},
		{name: "duration without unit", file: "[sidecar]\ndial_timeout = \"5\"\n", want: []string{"config.toml:2: sidecar.dial_timeout: not a duration"}},
		{name: "duration integer", file: "[sidecar]\nidle_timeout = 5\n", want: []string{"sidecar.idle_timeout: must be a duration string"}},
		{name: "duration env zero", env: map[string]string{"NORA_SIDECAR_IDLE_TIMEOUT": "0s"}, want: []string{`NORA_SIDECAR_IDLE_TIMEOUT="0s": must be > 0`}},
		{name: "size junk", env: map[string]string{"NORA_SIDECAR_STALE_MAX_BYTES": "lots"}, want: []string{"not a size"}},
		{name: "object larger than cache", file: "[sidecar]\nstale_max_bytes = \"1MiB\"\nstale_max_object_bytes = \"2MiB\"\n",
			want: []string{"config.toml:3: sidecar.stale_max_object_bytes: must not exceed stale_max_bytes"}},
		{name: "procs negative", file: "[sidecar]\nprocs = -1\n",
			want: []string{"config.toml:2: sidecar.procs: must be >= 0 (got -1)"}},
		{name: "max connections zero", env: map[string]string{"NORA_SIDECAR_MAX_CONNECTIONS": "0"}, want: []string{"must be >= 1"}},
		{name: "max upstream conns zero", file: "[sidecar]\nmax_upstream_conns_per_host = 0\n",
			want: []string{"config.toml:2: sidecar.max_upstream_conns_per_host: must be >= 1 (got 0)"}},
		{name: "max upstream conns env", env: map[string]string{"NORA_SIDECAR_MAX_UPSTREAM_CONNS_PER_HOST": "many"},
			want: []string{`env NORA_SIDECAR_MAX_UPSTREAM_CONNS_PER_HOST="many": not an integer`}},
		{name: "resolve target not ip", file: "[sidecar.resolve]\n\"pypi-a.test:443\" = \"somehost:8443\"\n",
			want: []string{`config.toml:2: sidecar.resolve."pypi-a.test:443": target "somehost:8443" must be ip:port`}},
		{name: "resolve key without port", env: map[string]string{"NORA_SIDECAR_RESOLVE": "pypi-a.test=127.0.0.1:80"},
			want: []string{`key "pypi-a.test" must be host:port`}},
		{name: "alias with scheme", file: "[sidecar.aliases]\npypi = [\"https://files.example\"]\n",
			want: []string{`alias "https://files.example" must be a host name`}},
		{name: "allow host with path", env: map[string]string{"NORA_SIDECAR_ALLOW_HOSTS": "a.test,b.test/x"},
			want: []string{`entry "b.test/x" must be a host or host:port`}},
		{name: "duplicate pypi upstream", file: "[pypi]\nproxies = [\"https://pypi.org/simple\", \"https://PYPI.org:443/simple/\"]\n",
			want: []string{"config.toml:2: pypi.proxies[1]: duplicate upstream pypi:https://pypi.org/simple"}},
		{name: "duplicate docker prefix", env: map[string]string{"NORA_DOCKER_PROXIES": "https://a.test||x,https://b.test||x"},
			want: []string{`NORA_DOCKER_PROXIES[1]="https://b.test||x": duplicate docker prefix "x"`}},
		{name: "docker upstream without url", file: "[[docker.upstreams]]\nauth = \"u:p\"\n",
			want: []string{"docker.upstreams[0]: missing url"}},
		{name: "maven entry of wrong type", file: "[maven]\nproxies = [42]\n", want: []string{"maven.proxies[0]: must be a URL or a {url, auth} table"}},
		{name: "proxy timeout zero", file: "[pypi]\nproxy_timeout = 0\n", want: []string{"config.toml:2: pypi.proxy_timeout: must be >= 1"}},
		{name: "env proxy timeout junk", env: map[string]string{"NORA_DOCKER_READ_TIMEOUT": "1m"}, want: []string{`NORA_DOCKER_READ_TIMEOUT="1m": not an integer`}},
		{name: "registries enable unknown (env)", env: map[string]string{"NORA_REGISTRIES_ENABLE": "docker,dokcer"},
			want: []string{`env NORA_REGISTRIES_ENABLE="docker,dokcer": unknown format "dokcer"`}},
		{name: "registries enable unknown (file)", file: "[registries]\nenable = [\"npm\", \"yarn\"]\n",
			want: []string{`config.toml:2: registries.enable: unknown format "yarn"`}},
		{name: "registries enable wrong type", file: "[registries]\nenable = 3\n", want: []string{"registries.enable: must be a list of strings"}},
		{name: "rpm env without name", env: map[string]string{"NORA_REGISTRIES_ENABLE": "rpm", "NORA_RPM_PROXIES": "https://mirror.test/el9"},
			want: []string{"NORA_RPM_PROXIES[0]", "want name=url|auth"}},
		{name: "rpm file entry wrong type", file: "[rpm]\nenabled = true\n[rpm.proxies]\nbase = 1\n", want: []string{"config.toml:4: rpm.proxies.base: must be a URL"}},
		{name: "legacy enabled junk", env: map[string]string{"NORA_GEMS_ENABLED": "on"}, want: []string{`NORA_GEMS_ENABLED="on"`}},
		{name: "nuget search service bad", file: "[nuget]\nenabled = true\nsearch_service = \"nowhere\"\n",
			want: []string{"config.toml:3: nuget.search_service: invalid URL"}},
		{name: "every problem is reported", file: "[circuit_breaker]\nfailure_threshold = 0\n[sidecar]\nbogus = 1\n",
			env:  map[string]string{"NORA_CB_RESET_TIMEOUT": "x"},
			want: []string{"failure_threshold: must be >= 1", "sidecar.bogus", "NORA_CB_RESET_TIMEOUT"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := load(t, tc.file, tc.env, tc.flags)
			if err == nil {
				t.Fatalf("Load succeeded (%d upstreams), want error containing %q", len(cfg.Upstreams), tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain %q", err, w)
				}
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("error %v holds no *Error", err)
			}
		})
	}
}

func TestErrorsNeverShowCredentials(t *testing.T) {
	env := map[string]string{
		"NORA_MAVEN_PROXIES":  "ht tp://user:s3cret@x.test|a:s3cret2",
		"NORA_DOCKER_PROXIES": "ftp://u:s3cret@d.test|b:s3cret3|p",
		"NORA_NPM_PROXY":      "gopher://u:s3cret@n.test",
	}
	file := "[pypi]\nproxies = [{url = \"ftp://u:s3cret@p.test\", auth = \"c:s3cret4\"}]\n"
	_, err := load(t, file, env, Flags{})
	if err == nil {
		t.Fatal("want errors")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error leaks a credential:\n%v", err)
	}
	if got := strings.Count(err.Error(), "\n") + 1; got != 4 {
		t.Errorf("got %d problems, want 4:\n%v", got, err)
	}
}

func TestMissingNamedFile(t *testing.T) {
	missing := func(string) ([]byte, error) { return nil, errNotExist() }
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"flag", Options{Flags: Flags{ConfigPath: "/etc/nora/x.toml"}, ReadFile: missing}, `flag --config="/etc/nora/x.toml": cannot read config file`},
		{"env", Options{LookupEnv: lookup(map[string]string{"NORA_CONFIG_PATH": "/c.toml"}), ReadFile: missing}, `env NORA_CONFIG_PATH="/c.toml": cannot read config file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// Without a named file, a missing ./config.toml just means defaults.
	cfg, err := Load(Options{ReadFile: missing})
	if err != nil || cfg.Path != "" {
		t.Fatalf("defaults: cfg.Path=%q err=%v", cfg.Path, err)
	}
}

func TestErrorString(t *testing.T) {
	tests := []struct {
		e    Error
		want string
	}{
		{Error{Source: "file config.toml", Key: "circuit_breaker.failure_threshold", Line: 12, Problem: "must be >= 1 (got 0)"},
			"config.toml:12: circuit_breaker.failure_threshold: must be >= 1 (got 0)"},
		{Error{Source: "file /etc/nora/config.toml", Problem: "invalid TOML: x"}, "/etc/nora/config.toml: invalid TOML: x"},
		{Error{Source: "env", Key: "NORA_CB_THRESHOLD", Value: "five", Problem: "not an integer"}, `env NORA_CB_THRESHOLD="five": not an integer`},
		{Error{Source: "flag", Key: "--listen", Value: "", Problem: "must be host:port"}, `flag --listen="": must be host:port`},
	}
	for _, tc := range tests {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

// A password holding /, ? or # (unencoded, as people paste them) ends the
// URL's authority early for the parser; the problem about it must hide the
// whole password all the same (docs/behaviour.md §9).
func TestProblemsHidePasswordsHoldingURLDelimiters(t *testing.T) {
	for _, pw := range []string{"se/cr3t", "se?cr3t", "se#cr3t", "a:b/se/cr3t", "se/cr3t@x"} {
		t.Run(pw, func(t *testing.T) {
			env := map[string]string{"NORA_NPM_PROXY": "https://user:" + pw + "@npm.test"}
			file := "[maven]\nproxies = [\"https://user:" + pw + "@m.test/m2\"]\n"
			_, err := load(t, file, env, Flags{})
			if err == nil {
				t.Fatal("accepted a URL whose password ends its host early")
			}
			for _, part := range []string{"cr3t", "se/", "se?", "se#"} {
				if strings.Contains(err.Error(), part) {
					t.Fatalf("error shows %q of the password:\n%v", part, err)
				}
			}
		})
	}
}

// An admin_token no Authorization header can carry (white space at either
// end, as a Secret written by `echo` has, or a control character) would lock
// every caller out of the admin API; it is refused, in the file and in the
// environment, without showing it (docs/behaviour.md §7).
func TestAdminTokenNoHeaderCanCarryIsRefused(t *testing.T) {
	for _, tok := range []string{"s3cret\n", " s3cret", "s3cret\t", "s3\x00cret", "s3\rcret", "s3\x7fcret"} {
		_, err := load(t, "", map[string]string{"NORA_SIDECAR_ADMIN_TOKEN": tok}, Flags{})
		if err == nil {
			t.Errorf("admin_token %q accepted", tok)
			continue
		}
		if !strings.Contains(err.Error(), "admin_token") && !strings.Contains(err.Error(), "ADMIN_TOKEN") || strings.Contains(err.Error(), "s3") {
			t.Errorf("admin_token %q: error does not name the key or shows the token: %v", tok, err)
		}
	}
	if _, err := load(t, "[sidecar]\nadmin_token = \"s3cret\\n\"\n", nil, Flags{}); err == nil {
		t.Error("admin_token with a newline in the file accepted")
	}
	for _, tok := range []string{"s3cret", "a b", "tök-ü", "x.y_z~+/="} {
		if _, err := load(t, "", map[string]string{"NORA_SIDECAR_ADMIN_TOKEN": tok}, Flags{}); err != nil {
			t.Errorf("admin_token %q refused: %v", tok, err)
		}
	}
}
