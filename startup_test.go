package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/cli"
)

// startupFixture is a CA pair, an upstream roots file and room for a stale
// cache, all usable: the configuration every start-up check passes.
type startupFixture struct {
	dir, cert, key, staleDir string
}

func newStartupFixture(t *testing.T) startupFixture {
	t.Helper()
	dir := t.TempDir()
	if code, _, errOut := runCLI(t, "ca", "init", "--out", filepath.Join(dir, "ca")); code != 0 {
		t.Fatalf("ca init: %s", errOut)
	}
	return startupFixture{dir: dir, cert: filepath.Join(dir, "ca", "ca.pem"), key: filepath.Join(dir, "ca", "ca-key.pem"),
		staleDir: filepath.Join(dir, "stale")}
}

// config writes a config.toml naming the fixture's files, with the given
// lines replacing the defaults of the same keys.
func (f startupFixture) config(t *testing.T, override map[string]string) string {
	t.Helper()
	keys := map[string]string{
		"listen": `"127.0.0.1:0"`, "admin_listen": `"127.0.0.1:0"`,
		"ca_cert": `"` + f.cert + `"`, "ca_key": `"` + f.key + `"`,
		"upstream_ca": `"` + f.cert + `"`, "stale_dir": `"` + f.staleDir + `"`,
	}
	for k, v := range override {
		keys[k] = v
	}
	var b strings.Builder
	b.WriteString("[sidecar]\n")
	for _, k := range []string{"listen", "admin_listen", "ca_cert", "ca_key", "upstream_ca", "stale_dir"} {
		b.WriteString(k + " = " + keys[k] + "\n")
	}
	p := filepath.Join(f.dir, "config.toml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStartupChecksAgree walks every start-up check serve makes: for each,
// a configuration that fails only that check is refused by check-config and
// by serve alike, with exit code 2 and the same problem, and check-config
// --skip-files (which leaves files alone) passes it. A check added to
// cli.StartupChecks without a case here fails the test.
func TestStartupChecksAgree(t *testing.T) {
	clearNoraEnv(t)
	cases := map[string]func(t *testing.T, f startupFixture) (path, want string){
		"ca_cert, ca_key": func(t *testing.T, f startupFixture) (string, string) {
			// What a Secret volume gives once the pod has an fsGroup.
			if err := os.Chmod(f.key, 0o640); err != nil {
				t.Fatal(err)
			}
			return f.config(t, nil), "has mode 0640"
		},
		"upstream_ca": func(t *testing.T, f startupFixture) (string, string) {
			junk := filepath.Join(f.dir, "roots.pem")
			if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return f.config(t, map[string]string{"upstream_ca": `"` + junk + `"`}), "no PEM certificates found"
		},
		"stale_dir": func(t *testing.T, f startupFixture) (string, string) {
			file := filepath.Join(f.dir, "a-file")
			if err := os.WriteFile(file, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return f.config(t, map[string]string{"stale_dir": `"` + filepath.Join(file, "stale") + `"`}), "is not a directory"
		},
	}
	for _, check := range cli.StartupChecks() {
		t.Run(check.Keys, func(t *testing.T) {
			breakIt, ok := cases[check.Keys]
			if !ok {
				t.Fatalf("start-up check %q has no case here", check.Keys)
			}
			path, problem := breakIt(t, newStartupFixture(t))
			want := "sidecar " + check.Keys + ": "
			code, _, errOut := runCLI(t, "check-config", "--config", path)
			if code != cli.ExitUsage || !strings.Contains(errOut, want) || !strings.Contains(errOut, problem) {
				t.Fatalf("check-config: exit %d, stderr %q; want %d naming %q", code, errOut, cli.ExitUsage, want+problem)
			}
			if code, _, errOut := runCLI(t, "check-config", "--skip-files", "--config", path); code != cli.ExitOK {
				t.Errorf("check-config --skip-files: exit %d: %s", code, errOut)
			}
			// An address file that cannot be written makes a serve that wrongly
			// got past its checks exit 1 instead of serving on.
			noAddr := filepath.Join(t.TempDir(), "no", "such", "dir", "a.json")
			code, _, serveErr := runCLI(t, "serve", "--config", path, "--addr-file", noAddr)
			if code != cli.ExitUsage || !strings.Contains(serveErr, want) || !strings.Contains(serveErr, problem) {
				t.Fatalf("serve: exit %d, stderr %q; want %d naming %q", code, serveErr, cli.ExitUsage, want+problem)
			}
		})
	}
	for keys := range cases {
		found := false
		for _, c := range cli.StartupChecks() {
			found = found || c.Keys == keys
		}
		if !found {
			t.Errorf("case %q tests no start-up check", keys)
		}
	}
}

// TestStartupFixturePasses is the control: with every file usable both
// check-config and serve's checks pass, so the refusals above come from the
// one file each case breaks.
func TestStartupFixturePasses(t *testing.T) {
	clearNoraEnv(t)
	f := newStartupFixture(t)
	code, out, errOut := runCLI(t, "check-config", "--config", f.config(t, nil))
	if code != cli.ExitOK {
		t.Fatalf("check-config: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "start-up checks of the files it names: ok") || !strings.Contains(out, "interception: on") {
		t.Errorf("check-config output:\n%s", out)
	}
	if _, err := os.Stat(f.staleDir); err == nil {
		t.Error("check-config created the stale directory; its checks must only read")
	}
}

// TestEqualPortsRefusedByBoth: an admin listener on the proxy's port is a
// configuration error for check-config and serve, before either binds.
func TestEqualPortsRefusedByBoth(t *testing.T) {
	clearNoraEnv(t)
	path := writeFile(t, "config.toml", "[sidecar]\nlisten = \"0.0.0.0:3128\"\nadmin_listen = \"127.0.0.1:3128\"\n")
	for _, cmd := range []string{"check-config", "serve"} {
		code, _, errOut := runCLI(t, cmd, "--config", path)
		if code != cli.ExitUsage || !strings.Contains(errOut, "sidecar.admin_listen: must not take the port of listen") {
			t.Errorf("%s: exit %d, stderr %q", cmd, code, errOut)
		}
	}
}
