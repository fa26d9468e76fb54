package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/config"
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
	if code := CheckConfig(cfg, &out); code != ExitOK {
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
	if code := Status(srv.URL, &out, &errOut); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"npm:https://registry.npmjs.org", "open", "3s ago", "27s", "12"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("not json")) }))
	defer bad.Close()
	if code := Status(bad.URL, &out, &errOut); code != ExitRuntime {
		t.Fatalf("garbage answer: exit %d, want %d", code, ExitRuntime)
	}
}
