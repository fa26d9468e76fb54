//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// suite holds what run.sh hands over: where scratch files go, where the
// installed tools are, and which nora-breaker binary to drive.
type suite struct {
	work, tools, binary string
}

// loadSuite reads the run.sh environment, skipping the test when it is absent
// so a plain `go test -tags e2e` outside run.sh explains itself.
func loadSuite(t *testing.T) suite {
	t.Helper()
	s := suite{work: os.Getenv("E2E_WORK"), tools: os.Getenv("E2E_TOOLS"), binary: os.Getenv("E2E_BINARY")}
	if s.work == "" || s.tools == "" || s.binary == "" {
		t.Skip("run through e2e/run.sh (E2E_WORK, E2E_TOOLS, E2E_BINARY unset)")
	}
	return s
}

// proc is a server process the test started; it is stopped by its PID.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startProc starts a long-running server in its own process group with its
// output in dir/<name>.log, and stops it by PID when the test ends.
func startProc(t *testing.T, dir, name string, env []string, argv ...string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("%s: log file: %v", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	// A process group lets the stop reach children (node, python) too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("%s: start %v: %v", name, argv, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	recordPID(cmd.Process.Pid, name)
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Logf("started %s pid %d: %s", name, cmd.Process.Pid, strings.Join(argv, " "))
	t.Cleanup(p.stop)
	return p
}

// recordPID appends "pid name" to $E2E_WORK/pids so run.sh can stop, by
// PID, anything a crashed or timed-out test run left behind.
func recordPID(pid int, name string) {
	f, err := os.OpenFile(filepath.Join(os.Getenv("E2E_WORK"), "pids"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%d %s\n", pid, name)
}

// stop sends SIGTERM to the process group of this PID, then SIGKILL if it has
// not exited within five seconds. Safe to call more than once.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
}

// listening waits until the process (started on port 0) listens on one
// loopback address and returns it. Servers bind port 0 themselves: a port
// reserved by the test and released for the server could be taken by any
// other program in between.
func (p *proc) listening(t *testing.T, within time.Duration) string {
	t.Helper()
	addrs, err := listenaddr.WaitProcess(p.cmd.Process.Pid, 1, within)
	if err != nil {
		t.Fatalf("%s: %v\n%s", p.name, err, tail(p.logText(), 2000))
	}
	return addrs[0]
}

// logText returns what the process has written so far.
func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// waitFor polls cond every 50 ms until it holds or the deadline passes.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitHTTP waits until url answers with the given status.
func waitHTTP(t *testing.T, url string, status int, within time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	waitFor(t, url, within, func() bool {
		resp, err := c.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == status
	})
}

// cleanEnv is the process environment without anything that would point a
// client at another proxy or another trust store: each client gets the test
// CA and the proxy explicitly.
func cleanEnv(extra ...string) []string {
	drop := []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "SSL_CERT", "CA_BUNDLE", "CA_CERTS",
		"NODE_EXTRA_CA_CERTS", "PIP_", "NPM_CONFIG", "GOFLAGS", "GOPROXY", "GONOSUMDB", "GOSUMDB", "GOPRIVATE",
		"GOMODCACHE", "GOPATH", "MAVEN_OPTS", "JAVA_TOOL_OPTIONS", "SSL_ROOTS"}
	var env []string
	for _, kv := range os.Environ() {
		name := strings.ToUpper(strings.SplitN(kv, "=", 2)[0])
		keep := true
		for _, d := range drop {
			if strings.Contains(name, d) {
				keep = false
				break
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// clientRun is one finished client invocation.
type clientRun struct {
	out  string
	err  error
	wall time.Duration
}

// runClient runs a client to completion (bounded by limit) and times it.
func runClient(t *testing.T, dir string, env []string, limit time.Duration, argv ...string) clientRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r := clientRun{out: string(out), err: err, wall: time.Since(start)}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		r.err = fmt.Errorf("%s: still running after %v: %w", argv[0], limit, ctx.Err())
	}
	t.Logf("%s took %v (err=%v)", strings.Join(argv, " "), r.wall.Round(time.Millisecond), r.err)
	return r
}

// mustRun is runClient that fails the test when the client fails.
func mustRun(t *testing.T, dir string, env []string, limit time.Duration, argv ...string) clientRun {
	t.Helper()
	r := runClient(t, dir, env, limit, argv...)
	if r.err != nil {
		t.Fatalf("%s failed: %v\n%s", strings.Join(argv, " "), r.err, tail(r.out, 3000))
	}
	return r
}

// tail keeps the last n bytes of s for failure messages.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// summary prints the one line each scenario reports.
func summary(client, fault, outcome string, wall time.Duration, seen string) {
	fmt.Printf("E2E SUMMARY | client=%s | fault=%s | outcome=%s | wall=%.2fs | upstream requests: %s\n",
		client, fault, outcome, wall.Seconds(), seen)
}

// writeFile writes a file, creating its folder, or fails the test.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
