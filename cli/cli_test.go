package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

func TestCheckConfigTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	text := `
[circuit_breaker]
enabled = true
[circuit_breaker.overrides.maven]
failure_threshold = 9
[circuit_breaker.overrides."go@sum.golang.org"]
reset_timeout = 5
[registries]
enable = "maven,go"
[maven]
proxies = ["https://a.example/m2", { url = "https://b.example/m2", auth = "reader:s3cret-pass" }]
`
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.Options{Flags: config.Flags{ConfigPath: path}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := CheckConfig(cfg, CheckOptions{Now: time.Now}, &out, &out); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	got := out.String()
	for _, want := range []string{"maven:https://a.example/m2", "maven:https://b.example/m2", "1/2", "2/2",
		`9 (format "maven")`, "30s (global)", "basic (reader)", "go  ",
		// every host's breaker, with where its settings came from
		"go@sum.golang.org", "sum.golang.org    go", `5s (override "go@sum.golang.org")`} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "s3cret-pass") {
		t.Fatal("check-config printed a password")
	}
}

// TestCheckConfigParents: check-config names the parent (its user, never
// its password), which parent each upstream goes through, and the parent's
// breaker with where its settings came from.
func TestCheckConfigParents(t *testing.T) {
	cfg := testkit.LoadConfig(t, `
[registries]
enable = "maven,go"
[maven]
proxies = ["https://a.example/m2"]
[sidecar]
parent_proxy = "http://bot:hunter2@proxy.corp:3128"
parent_no_proxy = ["corp.example", "10.0.0.0/8"]
[sidecar.parents]
go = "direct"
[circuit_breaker.overrides.parent]
failure_threshold = 3
`, nil)
	var out bytes.Buffer
	if code := CheckConfig(cfg, CheckOptions{SkipFiles: true, Now: time.Now}, &out, &out); code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	got := out.String()
	for _, want := range []string{"parent proxy: http://bot@proxy.corp:3128", "parent_no_proxy: corp.example, 10.0.0.0/8",
		"parent:http://proxy.corp:3128  proxy.corp:3128", `3 (override "parent")`} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, line := range strings.Split(got, "\n") {
		switch {
		case !strings.Contains(line, "https://"):
			// not a row of the upstream table
		case strings.HasPrefix(line, "maven "):
			if !strings.HasSuffix(strings.TrimSpace(line), "parent:http://proxy.corp:3128") {
				t.Errorf("maven's row does not name its parent: %q", line)
			}
		case strings.HasPrefix(line, "go "):
			if !strings.HasSuffix(strings.TrimSpace(line), "direct") {
				t.Errorf("go's row does not say direct: %q", line)
			}
		}
	}
	if strings.Contains(got, "hunter2") {
		t.Fatal("check-config printed the parent's password")
	}
}

func TestStatusTableAndErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/breakers" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`[{"key":"npm:https://registry.npmjs.org","format":"npm","state":"open","failure_count":5,
			"threshold":5,"reset_timeout_seconds":30,"last_failure_seconds_ago":3,"retry_after_seconds":27,
			"rejections":12,"forced":""}]`))
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if code := Status(context.Background(), StatusOptions{Admin: srv.URL}, &out, &errOut); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	// An older proxy without /breakers/history still gets its table.
	for _, want := range []string{"npm:https://registry.npmjs.org", "open", "5/5", "3s ago", "27s", "12"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("not json")) }))
	defer bad.Close()
	if code := Status(context.Background(), StatusOptions{Admin: bad.URL}, &out, &errOut); code != ExitRuntime {
		t.Fatalf("garbage answer: exit %d, want %d", code, ExitRuntime)
	}
}

// fakeAdmin answers /breakers and /breakers/history like a proxy with
// per-host breakers, a throttled host and a forced key, and demands a token.
func fakeAdmin(t *testing.T, token string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/breakers":
			// Config order: the pypi upstream, cargo, then pypi's alias host
			// (as a proxy that adds alias breakers after the upstreams might).
			w.Write([]byte(`[
{"key":"pypi:https://pypi.org/simple","format":"pypi","state":"closed","failure_count":0,"threshold":5,
 "reset_timeout_seconds":30,"host":"pypi.org","upstream":"pypi:https://pypi.org/simple"},
{"key":"cargo","format":"cargo","state":"open","failure_count":5,"threshold":5,"reset_timeout_seconds":30,
 "retry_after_seconds":30,"forced":"open","host":"crates.io","upstream":"cargo"},
{"key":"pypi:https://pypi.org/simple@files.pythonhosted.org","format":"pypi","state":"closed","threshold":5,
 "reset_timeout_seconds":30,"host":"files.pythonhosted.org","upstream":"pypi:https://pypi.org/simple",
 "throttled":true,"throttled_seconds":42}]`))
		case "/breakers/history":
			w.Write([]byte(`[{"at":"2026-11-30T12:00:05Z","key":"cargo","from":"closed","to":"open","why":"forced","failure_count":5},
{"at":"2026-11-30T12:00:01Z","key":"pypi:https://pypi.org/simple","from":"half_open","to":"closed","why":"probe succeeded"}]`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestStatusGroupsHostsAndShowsTransitions(t *testing.T) {
	srv := fakeAdmin(t, "tok-123")
	var out, errOut bytes.Buffer
	if code := Status(context.Background(), StatusOptions{Admin: srv.URL, Token: "tok-123"}, &out, &errOut); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	got := out.String()
	// The alias host's row follows its upstream's, before the next format.
	page, alias, cargo := strings.Index(got, "pypi.org  "), strings.Index(got, "@files.pythonhosted.org"), strings.Index(got, "\ncargo")
	if page < 0 || alias < page || cargo < alias {
		t.Errorf("rows not grouped per format and upstream (page %d, alias %d, cargo %d):\n%s", page, alias, cargo, got)
	}
	for _, want := range []string{"HOST", "THROTTLED", "42s left", "FORCED", "crates.io", "LAST TRANSITIONS",
		"2026-11-30 12:00:05  cargo", "closed → open", "forced", "half_open → closed", "probe succeeded"} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "12:00:05") > strings.Index(got, "12:00:01") {
		t.Errorf("transitions not newest first:\n%s", got)
	}
}

func TestStatusTokenErrors(t *testing.T) {
	srv := fakeAdmin(t, "tok-123")
	var out, errOut bytes.Buffer
	if code := Status(context.Background(), StatusOptions{Admin: srv.URL}, &out, &errOut); code != ExitRuntime {
		t.Fatalf("no token: exit %d", code)
	}
	if !strings.Contains(errOut.String(), "401") || !strings.Contains(errOut.String(), TokenEnv) {
		t.Errorf("401 not explained: %s", errOut.String())
	}
}

func TestStatusWatchRedrawsUntilCancelled(t *testing.T) {
	srv := fakeAdmin(t, "tok-123")
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int)
	go func() {
		done <- Status(ctx, StatusOptions{Admin: srv.URL, Token: "tok-123", Watch: true, Ticks: ticks}, &out, &errOut)
	}()
	// Each tick is taken only once the frame before it has been written, so
	// two ticks prove two whole frames; the third may be cut by the cancel,
	// and then it is not written at all.
	ticks <- time.Time{}
	ticks <- time.Time{}
	cancel()
	if code := <-done; code != ExitOK {
		t.Fatalf("watch exit %d: %s", code, errOut.String())
	}
	frames := strings.Count(out.String(), clearScreen)
	if frames < 2 || frames > 3 || strings.Count(out.String(), "LAST TRANSITIONS") != frames {
		t.Fatalf("%d frames, each must be whole:\n%s", frames, out.String())
	}
	if strings.Contains(out.String(), "canceled") {
		t.Fatalf("the interrupt showed up as an error:\n%s", out.String())
	}
}

func TestStatusWatchShowsErrorsAndGoesOn(t *testing.T) {
	srv := fakeAdmin(t, "tok-123")
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int)
	go func() { done <- Status(ctx, StatusOptions{Admin: srv.URL, Watch: true, Ticks: ticks}, &out, &errOut) }()
	ticks <- time.Time{}
	cancel()
	if code := <-done; code != ExitOK {
		t.Fatalf("watch exit %d", code)
	}
	if n := strings.Count(out.String(), "401"); n < 1 || n != strings.Count(out.String(), clearScreen) {
		t.Fatalf("each frame should say why it is empty:\n%s", out.String())
	}
}

func TestAdminTokenPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-file\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) { return v, k == TokenEnv && v != "" }
	}
	for _, c := range []struct {
		name, flag, env, file, want string
	}{
		{"flag wins", "from-flag", "from-env", file, "from-flag"},
		{"env next", "", "from-env", file, "from-env"},
		{"file last", "", "", file, "from-file"},
		{"none", "", "", "", ""},
	} {
		got, err := AdminToken(c.flag, c.file, env(c.env))
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	if _, err := AdminToken("", filepath.Join(t.TempDir(), "missing"), env("")); err == nil {
		t.Error("a missing --token-file is not an error")
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := AdminToken("", empty, env("")); err == nil {
		t.Error("an empty --token-file is not an error")
	}
}

// A stale_dir this process cannot write is a configuration error for
// check-config, as it is for serve; one that does not exist yet but can be
// created is fine.
func TestCheckConfigRefusesAStaleDirItCannotWrite(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		staleDir string
		code     int
	}{
		{filepath.Join(file, "stale"), ExitUsage},
		{file, ExitUsage},
		{filepath.Join(dir, "not", "yet"), ExitOK},
	} {
		cfg := testkit.LoadConfig(t, fmt.Sprintf("[sidecar]\nstale_dir = %q\n", c.staleDir), nil)
		var out bytes.Buffer
		if code := CheckConfig(cfg, CheckOptions{Now: time.Now}, &out, &out); code != c.code {
			t.Errorf("stale_dir %s: exit %d, want %d:\n%s", c.staleDir, code, c.code, out.String())
		}
		if c.code != ExitOK && !strings.Contains(out.String(), "stale_dir") {
			t.Errorf("stale_dir %s: the output does not say why:\n%s", c.staleDir, out.String())
		}
	}
}
