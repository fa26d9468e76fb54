package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// clearNoraEnv keeps the developer's own NORA_* variables out of the tests.
func clearNoraEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "NORA_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckConfigExample(t *testing.T) {
	clearNoraEnv(t)
	code, out, errOut := runCLI(t, "check-config", "--config", "config.example.toml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"docker:https://registry-1.docker.io", "pypi:https://pypi.org/simple",
		`override "docker:https://registry-1.docker.io"`, `format "pypi"`, "global", "basic (ci-reader)"} {
		if !strings.Contains(out, want) {
			t.Errorf("check-config output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "change-me") {
		t.Error("check-config printed a password")
	}
}

func TestConfigErrorsExitTwo(t *testing.T) {
	clearNoraEnv(t)
	cases := []struct {
		name, toml string
		env        map[string]string
		want       string
	}{
		{"invalid toml", "[circuit_breaker\nenabled = true\n", nil, ":1"},
		{"zero threshold", "[circuit_breaker]\nenabled = true\nfailure_threshold = 0\n", nil, "circuit_breaker.failure_threshold"},
		{"negative reset", "[circuit_breaker]\nreset_timeout = -1\n", nil, "circuit_breaker.reset_timeout"},
		{"env threshold", "", map[string]string{"NORA_CB_THRESHOLD": "five"}, `NORA_CB_THRESHOLD="five": not an integer`},
		{"bad url", "[maven]\nproxies = [\"ht!tp://x y\"]\n", nil, "maven.proxies"},
		{"bad maven env", "", map[string]string{"NORA_MAVEN_PROXIES": "|user:pass"}, "NORA_MAVEN_PROXIES"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			path := writeFile(t, "config.toml", tc.toml)
			code, _, errOut := runCLI(t, "check-config", "--config", path)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Fatalf("stderr %q lacks %q", errOut, tc.want)
			}
			if strings.Contains(errOut, "user:pass") {
				t.Fatalf("error leaked credentials: %q", errOut)
			}
		})
	}
}

func TestMissingNamedFileExitsTwo(t *testing.T) {
	clearNoraEnv(t)
	code, _, errOut := runCLI(t, "check-config", "--config", filepath.Join(t.TempDir(), "nope.toml"))
	if code != 2 || !strings.Contains(errOut, "nope.toml") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"ca"}, {"ca", "init"}, {"check-config", "extra"}} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, out, _ := runCLI(t, "version"); code != 0 || !strings.HasPrefix(out, "nora-breaker ") {
		t.Errorf("version: %d %q", code, out)
	}
}

func TestCAInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	code, out, errOut := runCLI(t, "ca", "init", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"NORA_TLS_CA_CERT", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "keytool", "SSL_CERT_FILE", "--cacert", "containerd"} {
		if !strings.Contains(out, want) {
			t.Errorf("instructions lack %q", want)
		}
	}
	for name, mode := range map[string]os.FileMode{"ca.pem": 0o644, "ca-key.pem": 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want %v", name, err, st.Mode().Perm(), mode)
		}
	}
	if code, _, _ := runCLI(t, "ca", "init", "--out", dir); code == 0 {
		t.Error("ca init overwrote an existing CA")
	}
}

func TestStatusAgainstDeadAdminFails(t *testing.T) {
	// A held port refuses connections, and nobody else can start listening
	// on it while the test runs (a closed listener's port could be taken).
	dead, err := listenaddr.NewHold()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dead.Close() })
	if code, _, errOut := runCLI(t, "status", "--admin", "http://"+dead.Addr()); code != 1 {
		t.Fatalf("exit %d (%s), want 1", code, errOut)
	}
}

// writeAddrFile names what the listeners really bound, port 0 resolved.
func TestAddrFileNamesTheBoundListeners(t *testing.T) {
	var lns [2]net.Listener
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		lns[i] = ln
	}
	path := filepath.Join(t.TempDir(), "addrs.json")
	if err := writeAddrFile(path, lns[0], lns[1]); err != nil {
		t.Fatal(err)
	}
	got, err := listenaddr.WaitFile(path, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got["listen"] != lns[0].Addr().String() || got["admin"] != lns[1].Addr().String() || len(got) != 2 {
		t.Fatalf("address file %v; listeners %v and %v", got, lns[0].Addr(), lns[1].Addr())
	}
	if err := writeAddrFile("", lns[0], lns[1]); err != nil {
		t.Fatalf("no --addr-file: %v", err)
	}
}

// An address file that cannot be written is a runtime failure: whoever
// asked for it would wait for it in vain.
func TestServeUnwritableAddrFileExitsOne(t *testing.T) {
	clearNoraEnv(t)
	conf := writeFile(t, "config.toml", "[sidecar]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n")
	code, _, errOut := runCLI(t, "serve", "--config", conf, "--addr-file", filepath.Join(t.TempDir(), "no", "such", "dir", "a.json"))
	if code != 1 || !strings.Contains(errOut, "addr-file") {
		t.Fatalf("exit %d, stderr %q; want 1 naming --addr-file", code, errOut)
	}
}

// A stale_dir that cannot be written stops serve at start with a
// configuration error naming it once, instead of a warning per request.
func TestServeRefusesAStaleDirItCannotWrite(t *testing.T) {
	clearNoraEnv(t)
	file := writeFile(t, "not-a-dir", "")
	conf := writeFile(t, "config.toml", "[sidecar]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nstale_dir = \""+
		filepath.Join(file, "stale")+"\"\n")
	code, _, errOut := runCLI(t, "serve", "--config", conf)
	if code != 2 || strings.Count(errOut, "stale_dir") != 1 || strings.Contains(errOut, "stale cache: stale cache") {
		t.Fatalf("exit %d, stderr %q; want 2 and the cause named once", code, errOut)
	}
}

// TestProcessReloadAndShutdown runs the real binary: it serves, reloads on
// SIGHUP and on a file change, refuses an invalid file while keeping the old
// configuration, and exits 0 on SIGTERM.
func TestProcessReloadAndShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	clearNoraEnv(t)
	bin := buildBinary(t)
	// Port 0: the process takes whatever the kernel gives it and says
	// which in the address file.
	conf := "[circuit_breaker]\nenabled = true\nfailure_threshold = 3\n[registries]\nenable = \"maven\"\n" +
		"[maven]\nproxies = [\"http://maven-a.test/m2\"]\n[sidecar]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n"
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, bin, path, nil)
	cmd, bound := srv.cmd, srv.bound
	if st, err := os.Stat(srv.addrFile); err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("address file: %v, mode %v; want 0644", err, st.Mode().Perm())
	}
	admin := bound["admin"]
	threshold := func() int {
		resp, err := http.Get("http://" + admin + "/breakers")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var rows []struct{ Threshold int }
		if json.NewDecoder(resp.Body).Decode(&rows) != nil || len(rows) == 0 {
			return -1
		}
		return rows[0].Threshold
	}
	waitFor(t, "serving with threshold 3", func() bool { return threshold() == 3 })

	// The listen address must stay the same: only the threshold changes.
	text := strings.Replace(mustRead(t, path), "failure_threshold = 3", "failure_threshold = 7", 1)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "file-change reload to threshold 7", func() bool { return threshold() == 7 })

	if err := os.WriteFile(path, []byte("[circuit_breaker]\nfailure_threshold = 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "refused reload counted", func() bool {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `nora_sidecar_config_reloads_total{result="error"} 1`) ||
			strings.Contains(string(b), `nora_sidecar_config_reloads_total{result="error"} 2`)
	})
	if got := threshold(); got != 7 {
		t.Fatalf("after an invalid reload the threshold is %d, want the old 7", got)
	}

	// A truncating writer, caught in the moment the file is empty (issue 21,
	// point 2: the proxy ran on defaults, breakers disabled, the upstreams
	// gone): refused and counted like an invalid file.
	refused := func() int { return max(0, metricValue(admin, `nora_sidecar_config_reloads_total{result="error"}`)) }
	before := refused()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "the empty file's reload refused and counted", func() bool { return refused() > before })
	if got := threshold(); got != 7 {
		t.Fatalf("after an empty file's reload the threshold is %d, want the old 7 (the upstream and breaker kept)", got)
	}

	checkServingLine(t, srv.stop(t), bound)
}

// served is a nora-breaker serve process of a test (startServe).
type served struct {
	cmd      *exec.Cmd
	exited   chan error
	logs     *bytes.Buffer // read only after the process has exited (stop)
	addrFile string
	bound    map[string]string // the address file: "listen", "admin"
}

// buildBinary builds nora-breaker into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nora-breaker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// startServe runs bin serve --config conf with env (nil: the test's own)
// and waits for its address file; the process is killed at cleanup if it
// is still running.
func startServe(t *testing.T, bin, conf string, env []string) *served {
	t.Helper()
	s := &served{exited: make(chan error, 1), logs: &bytes.Buffer{}, addrFile: filepath.Join(t.TempDir(), "addrs.json")}
	s.cmd = exec.Command(bin, "serve", "--config", conf, "--addr-file", s.addrFile)
	s.cmd.Env = env
	s.cmd.Stderr = s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exited <- s.cmd.Wait() }()
	t.Cleanup(func() { _ = s.cmd.Process.Kill() })
	bound, err := listenaddr.WaitFile(s.addrFile, s.cmd.Process.Pid, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.bound = bound
	return s
}

// stop sends SIGTERM, fails t unless the process exits cleanly within 30 s,
// and returns its log.
func (s *served) stop(t *testing.T) string {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, s.logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
	return s.logs.String()
}

// metricValue is the value of the /metrics line series (name and labels)
// on the admin listener admin, or -1 when it cannot be read.
func metricValue(admin, series string) int {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	return -1
}

// checkServingLine: the "nora-breaker serving" log line names the same
// addresses as the address file.
func checkServingLine(t *testing.T, logs string, bound map[string]string) {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var ev struct{ Message, Listen, Admin string }
		if json.Unmarshal([]byte(line), &ev) != nil || ev.Message != "nora-breaker serving" {
			continue
		}
		if ev.Listen != bound["listen"] || ev.Admin != bound["admin"] {
			t.Fatalf("serving line has listen %q admin %q; address file %v", ev.Listen, ev.Admin, bound)
		}
		return
	}
	t.Fatalf("no \"nora-breaker serving\" line in:\n%s", logs)
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor polls cond until it holds or 15 s pass: it waits for an event the
// process reports, it does not sleep in place of one.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
