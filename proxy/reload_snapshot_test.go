package proxy

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// staleModeConfig is one maven upstream with a stale cache in dir under
// stale_authenticated = mode.
func staleModeConfig(base, dir, mode string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 5
reset_timeout = 30
[registries]
enable = "maven"
[maven]
proxies = [%q]
proxy_timeout = 2
[sidecar]
stale_dir = %q
stale_authenticated = %q
`, base, dir, mode)
}

// TestReloadStaleModeGivesOneConfigurationPerRequest: a copy Alice stored
// under "share" must not reach Bob, or an anonymous client, once a reload
// switched to "isolate" — whatever mode the copy was stored under.
func TestReloadStaleModeGivesOneConfigurationPerRequest(t *testing.T) {
	var down atomic.Bool
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "upstream down", http.StatusBadGateway)
			return
		}
		io.WriteString(w, "secret of "+r.Header.Get("Authorization"))
	})
	base, dir := up.URL+"/m2", filepath.Join(t.TempDir(), "stale")
	tp := newTestProxy(t, staleModeConfig(base, dir, "share"), nil)
	client := proxyClient(t, tp, nil)
	alice := fbHeader("Authorization", "Bearer ALICE")
	if resp, body := request(t, client, "GET", base+"/secret-a", alice); resp.StatusCode != 200 || body != "secret of Bearer ALICE" {
		t.Fatalf("Alice: %d %q", resp.StatusCode, body)
	}
	fbWaitStored(t, tp, "maven", base+"/secret-a", alice)
	down.Store(true)
	// Under "share" (one tenant) the copy is everybody's: this shows it is
	// there to be served.
	if resp, body := request(t, client, "GET", base+"/secret-a", fbHeader("Authorization", "Bearer BOB")); resp.Header.Get("X-Nora-Stale") != "true" || body != "secret of Bearer ALICE" {
		t.Fatalf("under share, with the upstream down: %d %q", resp.StatusCode, body)
	}

	if _, err := tp.Reload(testkit.LoadConfig(t, staleModeConfig(base, dir, "isolate"), nil)); err != nil {
		t.Fatal(err)
	}
	for _, who := range []struct {
		name string
		hdr  http.Header
	}{{"Bob", fbHeader("Authorization", "Bearer BOB")}, {"anonymous", nil}} {
		resp, body := request(t, client, "GET", base+"/secret-a", who.hdr)
		if strings.Contains(body, "ALICE") || resp.Header.Get("X-Nora-Stale") != "" {
			t.Errorf("%s got Alice's copy after the reload: %d %q", who.name, resp.StatusCode, body)
		}
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("%s: %d, want the upstream's own 502", who.name, resp.StatusCode)
		}
	}
}

// TestReloadResolveTakesEffect: [sidecar.resolve] is read from the snapshot
// of each request, so a reload that points a name elsewhere moves the next
// request there.
func TestReloadResolveTakesEffect(t *testing.T) {
	first := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "first") })
	second := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "second") })
	text := func(target string) string {
		return biMavenChain(3, 10, "http://repo.test:8081/m2") + "[sidecar.resolve]\n\"repo.test:8081\" = \"" +
			strings.TrimPrefix(target, "http://") + "\"\n"
	}
	tp := newTestProxy(t, text(first.URL), nil)
	client := proxyClient(t, tp, nil)
	if _, body := getURL(t, client, "http://repo.test:8081/m2/a.jar"); body != "first" {
		t.Fatalf("before the reload: %q", body)
	}
	restart, err := tp.Reload(testkit.LoadConfig(t, text(second.URL), nil))
	if err != nil || len(restart) != 0 {
		t.Fatalf("reload: %v, needs restart %v", err, restart)
	}
	if _, body := getURL(t, client, "http://repo.test:8081/m2/a.jar"); body != "second" {
		t.Fatalf("after the reload: %q, want the new resolve target", body)
	}
}

// TestReloadEverySidecarKeyIsAccountedFor walks every [sidecar] key: each
// one either takes effect on reload or is reported as needing a restart,
// never neither, never both.
func TestReloadEverySidecarKeyIsAccountedFor(t *testing.T) {
	restart := map[string]bool{}
	for _, s := range restartSettings() {
		restart[s.key] = true
	}
	for _, key := range config.SidecarKeys() {
		live := slices.Contains(reloadableSettings(), key)
		if live == restart[key] {
			t.Errorf("[sidecar] %s: reloadable=%v, needs restart=%v; it must be exactly one", key, live, restart[key])
		}
	}
	for _, key := range append(reloadableSettings(), keysOf(restart)...) {
		if !slices.Contains(config.SidecarKeys(), key) {
			t.Errorf("%q is listed but is no [sidecar] key", key)
		}
	}
}

// TestReloadReportsEachRestartSetting changes each restart-only setting on
// its own and checks that Reload names it.
func TestReloadReportsEachRestartSetting(t *testing.T) {
	base := testkit.LoadConfig(t, biMavenChain(3, 10, "http://repo.test/m2"), nil)
	tp := startProxy(t, base)
	changed := map[string]func(*config.Sidecar){
		"listen":                 func(s *config.Sidecar) { s.Listen = "127.0.0.1:1" },
		"admin_listen":           func(s *config.Sidecar) { s.AdminListen = "127.0.0.1:2" },
		"ca_cert":                func(s *config.Sidecar) { s.CACert = "/elsewhere/ca.pem" },
		"ca_key":                 func(s *config.Sidecar) { s.CAKey = "/elsewhere/ca-key.pem" },
		"stale_dir":              func(s *config.Sidecar) { s.StaleDir = "/elsewhere" },
		"stale_max_bytes":        func(s *config.Sidecar) { s.StaleMaxBytes++ },
		"stale_max_object_bytes": func(s *config.Sidecar) { s.StaleMaxObjectBytes++ },
		"idle_timeout":           func(s *config.Sidecar) { s.IdleTimeout += time.Second },
		"max_connections":        func(s *config.Sidecar) { s.MaxConnections++ },
		"procs":                  func(s *config.Sidecar) { s.Procs++ },
		"log_level":              func(s *config.Sidecar) { s.LogLevel = "debug" },
		"log_format":             func(s *config.Sidecar) { s.LogFormat = "console" },
		"shared_state":           func(s *config.Sidecar) { s.SharedState = "redis://127.0.0.1:1/0" },
		"shared_state_prefix":    func(s *config.Sidecar) { s.SharedStatePrefix = "other" },
		"shared_state_password":  func(s *config.Sidecar) { s.SharedStatePassword = "pw" },
	}
	for _, s := range restartSettings() {
		change, ok := changed[s.key]
		if !ok {
			t.Errorf("no change written for %s", s.key)
			continue
		}
		next := *base
		change(&next.Sidecar)
		got, err := tp.Reload(&next)
		if err != nil {
			t.Fatalf("%s: %v", s.key, err)
		}
		if !reflect.DeepEqual(got, []string{s.key}) {
			t.Errorf("changing %s: needs restart %v, want [%s]", s.key, got, s.key)
		}
		if _, err := tp.Reload(base); err != nil {
			t.Fatal(err)
		}
	}
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// reloadableSettings lists the [sidecar] settings that take effect for the
// requests arriving after a reload: the upstream transport's settings
// (upstreamSettings: a new transport is built when they change), the
// destination and host policy, the aliases and equivalent hosts (through
// the upstream table),
// the stale key mode, the admin token, and the parent proxies (the
// transport's settings, and each request's choice of a way out).
func reloadableSettings() []string {
	return []string{"upstream_ca", "dial_timeout", "tls_handshake_timeout", "resolve", "allow_hosts",
		"deny_unlisted", "aliases", "equivalents", "stale_authenticated", "admin_token", "throttle_default",
		"credential_headers", "max_upstream_conns_per_host", "retry_after_max", "log_refusals", "parent_proxy",
		"parent_proxy_password", "parent_no_proxy", "parents"}
}
